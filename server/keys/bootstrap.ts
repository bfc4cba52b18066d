import type { Database } from "../db/open.js";
import type { KeyService, NewKeys } from "./keys.js";

const BOOTSTRAP_LOCK = 72_410_002;
export const DEV_APP_NAME = "Local development app";

/**
 * Whether this start may create the development app: only where the operator asks
 * for it. `wanted` is `SVC_DEV_APP` (true: `1`, false: `0`, null: unset); unset, only
 * the embedded database (a developer's `npm start`) gets one, never a Postgres, where
 * a production deployment's instances would print a live credential into their logs.
 */
export function devAppWanted(db: Pick<Database, "kind">, wanted: boolean | null): boolean {
  return wanted ?? db.kind === "pglite";
}

/**
 * On first start with an empty database, where it is wanted (devAppWanted): a local
 * development app with test keys, returned once so the caller can print them (they
 * are stored hashed and can never be shown again). Instances starting together
 * create it once.
 */
export async function bootstrapDevApp(db: Database, keys: KeyService, wanted: boolean | null): Promise<NewKeys | null> {
  if (!devAppWanted(db, wanted)) return null;
  return db.exclusive(BOOTSTRAP_LOCK, async () => ((await keys.isEmpty()) ? keys.createApp(DEV_APP_NAME, "test") : null));
}

/**
 * The first start's banner, one line per entry (add a line by adding an entry). The
 * `export` lines use the variable names the SDK reads (`SVC_BASE_URL`, `SVC_API_KEY`).
 */
export function devAppBanner(created: NewKeys, baseUrl: string, signInLink?: string): string {
  return devAppBannerLines(created, baseUrl, signInLink).join("\n");
}

export function devAppBannerLines(created: NewKeys, baseUrl: string, signInLink?: string): string[] {
  return [
    "",
    "  A local development app was created (shown once; the secret is stored only as a hash):",
    "",
    `    base URL      ${baseUrl}/v1`,
    `    app ID        ${created.appId}  (environment: ${created.environment})`,
    `    app key       ${created.appKey}`,
    `    connect key   ${created.connectKey}`,
    `    API reference ${baseUrl}/docs`,
    ...(signInLink ? [`    dashboard     ${signInLink}  (one-time sign-in link, 15 minutes; more: npx svc dashboard)`] : []),
    "",
    "  For the SDK (new Svc() reads the first two) and the quick start's pairing (the third), paste into your shell:",
    "",
    `    export SVC_BASE_URL=${baseUrl}/v1`,
    `    export SVC_API_KEY=${created.appKey}`,
    `    export SVC_CONNECT_KEY=${created.connectKey}`,
    "",
    "  Next: pair a machine. Mint a session for a user (POST /v1/end_users/session) and open its url,",
    `  the connect page ${baseUrl}/connect; see docs/app/pairing.md.`,
    "",
    "  More apps and keys: npx svc apps create --name <name>   (npx svc --help)",
    "",
  ];
}
