import { useCallback, useLayoutEffect, useRef, useState, useSyncExternalStore } from "react";
import { NavLink, Outlet, useLocation } from "react-router";
import { useSession } from "../api/session";
import { AppSwitcher } from "./AppSwitcher";
import { EnvSwitcher } from "./EnvSwitcher";
import { SignOutButtons } from "./SignOutButtons";
import { APP_SECTIONS, ENV_SECTIONS, useLastApp, useWhere } from "./where";

/** The width under which the dashboard is laid out for a phone (styles.css has the same breakpoint). */
const PHONE = "(max-width: 720px)";

function useMediaQuery(query: string): boolean {
  const subscribe = useCallback(
    (notify: () => void) => {
      const list = window.matchMedia(query);
      list.addEventListener("change", notify);
      return () => list.removeEventListener("change", notify);
    },
    [query],
  );
  return useSyncExternalStore(subscribe, () => window.matchMedia(query).matches);
}

/** The signed-in frame: banner with the app and environment switchers, the sections, the page. */
export function Shell() {
  const me = useSession();
  const where = useWhere();
  const phone = useMediaQuery(PHONE);
  // Outside an app (the account page), the app chosen last stays chosen.
  const last = useLastApp(where, me.apps);
  const appId = where.app ?? last?.app ?? null;
  const app = appId ? me.apps.find((a) => a.id === appId) : undefined;
  const env = where.env ?? last?.env ?? "test";
  const base = appId ? `/apps/${encodeURIComponent(appId)}` : null;
  const name = me.owner.name ?? me.owner.email;
  return (
    <div className={`shell ${where.env ? `env-${where.env}` : ""}`}>
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="banner">
        <NavLink to="/" className="brand">
          svc dashboard
        </NavLink>
        <AppSwitcher apps={me.apps} current={app ?? null} />
        {appId && <EnvSwitcher app={appId} current={where.env} />}
        {phone ? (
          <AccountMenu name={name} />
        ) : (
          <div className="banner-end">
            <NavLink to="/account">{name}</NavLink>
            <SignOutButtons />
          </div>
        )}
      </header>
      {where.env === "live" && (
        <p className="env-banner env-banner-live" role="note">
          Live environment: real users and real money.
        </p>
      )}
      {base && <Sections base={base} env={env} />}
      <main id="main" tabIndex={-1}>
        <Outlet />
      </main>
    </div>
  );
}

/** On a phone, the account and signing out behind one button, so the banner keeps to two short rows. */
function AccountMenu({ name }: { name: string }) {
  const box = useRef<HTMLDetailsElement>(null);
  const close = () => box.current?.removeAttribute("open");
  return (
    <details className="account-menu" ref={box}>
      <summary aria-label={`Account of ${name}`}>Account</summary>
      <ul>
        <li>
          <NavLink to="/account" onClick={close}>
            {name}
          </NavLink>
        </li>
        <li className="account-menu-actions">
          <SignOutButtons />
        </li>
      </ul>
    </details>
  );
}

/**
 * The sections of the app. On a desktop a column; on a phone one row that scrolls sideways: a fade with
 * an arrow at an edge says there is more that way, and the current section is scrolled into view.
 */
function Sections({ base, env }: { base: string; env: string }) {
  const { pathname } = useLocation();
  const list = useRef<HTMLUListElement>(null);
  const [more, setMore] = useState({ before: false, after: false });
  const measure = useCallback(() => {
    const ul = list.current;
    if (!ul) return;
    const before = ul.scrollLeft > 1;
    const after = ul.scrollLeft + ul.clientWidth < ul.scrollWidth - 1;
    setMore((m) => (m.before === before && m.after === after ? m : { before, after }));
  }, []);
  useLayoutEffect(() => {
    const ul = list.current;
    if (!ul) return;
    const observer = new ResizeObserver(measure);
    observer.observe(ul);
    return () => observer.disconnect();
  }, [measure]);
  // The current section in the middle of the row when the row scrolls (a column does not: nothing moves).
  useLayoutEffect(() => {
    const ul = list.current;
    const current = ul?.querySelector<HTMLElement>("a.active");
    if (!ul || !current || ul.scrollWidth <= ul.clientWidth) return measure();
    const row = ul.getBoundingClientRect();
    const link = current.getBoundingClientRect();
    ul.scrollLeft += link.left - row.left - (row.width - link.width) / 2;
    measure();
  }, [pathname, measure]);
  return (
    <nav aria-label="Sections" className="sections">
      <ul ref={list} onScroll={measure}>
        {ENV_SECTIONS.map((s) => (
          <li key={s.path}>
            <NavLink to={`${base}/${env}/${s.path}`}>{s.label}</NavLink>
          </li>
        ))}
        {APP_SECTIONS.map((s) => (
          <li key={s.path}>
            <NavLink to={`${base}/${s.path}`}>{s.label}</NavLink>
          </li>
        ))}
      </ul>
      <span className="sections-more sections-more-before" aria-hidden="true" hidden={!more.before}>
        ‹
      </span>
      <span className="sections-more sections-more-after" aria-hidden="true" hidden={!more.after}>
        ›
      </span>
    </nav>
  );
}
