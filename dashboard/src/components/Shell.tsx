import { NavLink, Outlet } from "react-router";
import { useSession } from "../api/session";
import { AppSwitcher } from "./AppSwitcher";
import { EnvSwitcher } from "./EnvSwitcher";
import { SignOutButtons } from "./SignOutButtons";
import { APP_SECTIONS, ENV_SECTIONS, useLastApp, useWhere } from "./where";

/** The signed-in frame: banner with the app and environment switchers, the sections, the page. */
export function Shell() {
  const me = useSession();
  const where = useWhere();
  // Outside an app (the account page), the app chosen last stays chosen.
  const last = useLastApp(where, me.apps);
  const appId = where.app ?? last?.app ?? null;
  const app = appId ? me.apps.find((a) => a.id === appId) : undefined;
  const env = where.env ?? last?.env ?? "test";
  const base = appId ? `/apps/${encodeURIComponent(appId)}` : null;
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
        <div className="banner-end">
          <NavLink to="/account">{me.owner.name ?? me.owner.email}</NavLink>
          <SignOutButtons />
        </div>
      </header>
      {where.env === "live" && (
        <p className="env-banner env-banner-live" role="note">
          Live environment: real users and real money.
        </p>
      )}
      {base && (
        <nav aria-label="Sections" className="sections">
          <ul>
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
        </nav>
      )}
      <main id="main" tabIndex={-1}>
        <Outlet />
      </main>
    </div>
  );
}
