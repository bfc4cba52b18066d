import { Command, InvalidArgumentError, Option } from "commander";
import { ConfigError, parseConfig } from "../config.js";
import { OperationError, type OperationName } from "../admin/operations.js";
import { ApiError } from "../errors.js";
import { CliError, withAdmin, type Call } from "./admin-client.js";
import type { KeyInfo } from "../keys/keys.js";
import { registerPlanCommands } from "./plans.js";

/** `24h`, `30m`, `90s`, `7d` or plain seconds. */
function parseDuration(value: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(value.trim());
  if (!m) throw new InvalidArgumentError("expected a duration such as 24h, 30m, 90s, 7d or 0");
  return Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as "" | "s" | "m" | "h" | "d"];
}

const program = new Command()
  .name("svc")
  .description("Manage the service's apps and keys (works whether or not the server is running), and an app's plans (through the API, with its app key).")
  .option("--data-dir <dir>", "the embedded database's data folder (default: $SVC_DATA_DIR or .data)")
  .option("--database-url <url>", "use this Postgres instead of the embedded database (default: $DATABASE_URL)")
  .showHelpAfterError();

/**
 * Runs one operation and prints its result, as JSON with --json. The result is
 * the operation's answer as JSON (untyped across the admin socket); `print`
 * declares the shape it reads.
 */
function action<R>(op: OperationName, toArgs: (...a: never[]) => unknown, print: (result: R) => string) {
  return async (...params: unknown[]) => {
    const cmd = params[params.length - 1] as Command;
    const json = Boolean(cmd.opts().json);
    const global = program.opts();
    const config = parseConfig({
      ...process.env,
      ...(global.dataDir ? { SVC_DATA_DIR: global.dataDir } : {}),
      ...(global.databaseUrl ? { DATABASE_URL: global.databaseUrl } : {}),
    });
    // Only creating an app may make the embedded database; every other command needs one there already.
    const result = await withAdmin(config, (call: Call) => call(op, (toArgs as (...a: unknown[]) => unknown)(...params)), { mayCreate: op === "apps.create" });
    process.stdout.write(json ? `${JSON.stringify(result)}\n` : `${print(result as R)}\n`);
  };
}

const envOption = () => new Option("--environment <env>", "test or live").choices(["test", "live"]).default("test");
const keysTable = (keys: KeyInfo[]) =>
  keys
    .map((k) => `${k.kind.padEnd(8)} ${k.environment.padEnd(5)} ${k.state.padEnd(9)} ${k.display}${k.expiresAt ? `  (until ${k.expiresAt})` : ""}${k.lastUsedAt ? `  last used ${k.lastUsedAt}` : ""}`)
    .join("\n") || "(no keys)";
const newKeys = (r: { appId: string; environment: string; appKey: string; connectKey: string }) =>
  `app ID       ${r.appId} (${r.environment})\napp key      ${r.appKey}\nconnect key  ${r.connectKey}\n\nThe app key is shown once: store it now.`;

const apps = program.command("apps").description("apps");
apps
  .command("create")
  .description("create an app with an app key and a connect key for one environment")
  .requiredOption("--name <name>", "the app's name")
  .addOption(envOption())
  .option("--json", "print {appId, environment, appKey, connectKey} as JSON")
  .action(action("apps.create", (o: { name: string; environment: string }) => ({ name: o.name, environment: o.environment }), newKeys));
apps
  .command("list")
  .description("list apps")
  .option("--json", "print JSON")
  .action(
    action("apps.list", () => ({}), (r: { appId: string; name: string; createdAt: string }[]) =>
      r.map((a) => `${a.appId}  ${a.name}  (created ${a.createdAt})`).join("\n") || "(no apps)",
    ),
  );

const keys = program.command("keys").description("app keys and connect keys");
keys
  .command("create")
  .description("a new app key and connect key for an app and environment")
  .requiredOption("--app <appId>", "the app")
  .addOption(envOption())
  .option("--json", "print JSON")
  .action(action("keys.create", (o: { app: string; environment: string }) => ({ appId: o.app, environment: o.environment }), newKeys));
keys
  .command("list")
  .description("an app's keys and their state (secrets are never shown again)")
  .requiredOption("--app <appId>", "the app")
  .option("--json", "print JSON")
  .action(action("keys.list", (o: { app: string }) => ({ appId: o.app }), keysTable));
keys
  .command("rotate")
  .description("replace a key; the old one keeps working for the grace period")
  .argument("<key>", "an app key id (or the whole key) or a connect key")
  .option("--grace <duration>", "how long the old key keeps working (24h, 30m, 0 ...)", parseDuration, 86400)
  .option("--json", "print JSON")
  .action(
    action("keys.rotate", (key: string, o: { grace: number }) => ({ key, graceSeconds: o.grace }), (r: { kind: string; key: string; oldKeyExpiresAt: string }) =>
      `new ${r.kind} key  ${r.key}\nthe old key works until ${r.oldKeyExpiresAt}${r.kind === "app" ? "\n\nThe app key is shown once: store it now." : ""}`,
    ),
  );
keys
  .command("revoke")
  .description("stop a key at once")
  .argument("<key>", "an app key id (or the whole key) or a connect key")
  .option("--json", "print JSON")
  .action(action("keys.revoke", (key: string) => ({ key }), (r: KeyInfo) => `revoked ${r.kind} key ${r.display}`));

program
  .command("dashboard")
  .description(
    "print a one-time sign-in link to the owner's dashboard (single use, 15 minutes). With no owner account yet, makes one (owner@svc.localhost, or --email) and makes it an owner of every app; apps without members get the chosen owner",
  )
  .option("--email <email>", "the owner account to sign in as (default: the oldest app's first owner)")
  .option("--json", "print {url, email, expiresAt, created} as JSON")
  .action(
    action("owners.signInLink", (o: { email?: string }) => ({ email: o.email }), (r: { url: string; email: string; expiresAt: string; created: boolean }) =>
      `${r.created ? `Created the owner account ${r.email}.\n` : ""}Sign in to the dashboard as ${r.email} (single use, until ${r.expiresAt}):\n\n  ${r.url}\n`,
    ),
  );

registerPlanCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof ConfigError || err instanceof CliError || err instanceof OperationError || err instanceof ApiError) {
    process.stderr.write(`svc: ${err.message}\n`);
    process.exit(err instanceof ConfigError ? 2 : 1);
  }
  throw err;
}
