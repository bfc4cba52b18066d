import { useLocation } from "react-router";

export const ENV_SECTIONS = [
  { path: "overview", label: "Overview" },
  { path: "users", label: "End users" },
  { path: "usage", label: "Usage" },
  { path: "runs", label: "Runs" },
  { path: "requests", label: "API requests" },
  { path: "plans", label: "Plans" },
  { path: "billing", label: "Billing" },
  { path: "conversions", label: "Conversions" },
  { path: "webhooks", label: "Webhooks" },
] as const;
export const APP_SECTIONS = [
  { path: "keys", label: "Keys" },
  { path: "members", label: "Members" },
] as const;

export interface Where {
  app: string | null;
  env: "test" | "live" | null;
  /** The section's path segment (`runs`, `keys`), without a record's id. */
  section: string | null;
}

/** Where the page is, from its URL (the shell sits above the routes that name these). */
export function useWhere(): Where {
  const { pathname } = useLocation();
  const parts = pathname.split("/").filter(Boolean);
  if (parts[0] !== "apps" || !parts[1]) return { app: null, env: null, section: null };
  const app = decodeURIComponent(parts[1]);
  if (parts[2] === "test" || parts[2] === "live") return { app, env: parts[2], section: parts[3] ?? null };
  return { app, env: null, section: parts[2] ?? null };
}

/** The same section in another app or environment (a record's page goes back to its list). */
export function sectionPath(app: string, env: "test" | "live", where: Where): string {
  const a = encodeURIComponent(app);
  if (where.section && !where.env && APP_SECTIONS.some((s) => s.path === where.section)) return `/apps/${a}/${where.section}`;
  return `/apps/${a}/${env}/${where.env && where.section ? where.section : "overview"}`;
}

const LAST_APP = "svc.dashboard.lastApp";

/**
 * The app (and environment) the owner was last in, for the pages outside an app (the
 * account page): the switcher and the sections keep it. Kept in this tab's session
 * storage; an app the owner is no longer a member of is forgotten.
 */
export function useLastApp(where: Where, apps: readonly { id: string }[]): { app: string; env: "test" | "live" } | null {
  if (where.app) {
    try {
      sessionStorage.setItem(LAST_APP, JSON.stringify({ app: where.app, env: where.env ?? "test" }));
    } catch {
      /* storage refused (private mode): nothing kept */
    }
    return { app: where.app, env: where.env ?? "test" };
  }
  try {
    const last = JSON.parse(sessionStorage.getItem(LAST_APP) ?? "null") as { app?: unknown; env?: unknown } | null;
    if (last && typeof last.app === "string" && apps.some((a) => a.id === last.app)) return { app: last.app, env: last.env === "live" ? "live" : "test" };
  } catch {
    /* nothing kept, or not ours */
  }
  return null;
}
