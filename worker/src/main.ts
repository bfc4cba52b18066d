import path from "node:path";
import { Command, InvalidArgumentError } from "commander";
import { pair } from "./pair.js";
import { serve, unpairRemotely, type Served } from "./connection.js";
import { servedFingerprint, watchServed } from "./served-watch.js";
import { checkToken } from "./token-check.js";
import { discoverRuntimes } from "./runtimes/discover.js";
import { lockServing } from "./lock.js";
import { configDir, Store } from "./store.js";
import { machinePolicy } from "./policy/index.js";
import { defaultPolicy } from "./policy/schema.js";
import { policySummary, registerPolicyCommand } from "./policy/command.js";
import { SessionBook } from "./sessions.js";
import { expireSessionsWhileServing, forgetSessionsOnUnpair, registerSessionsCommand } from "./sessions-command.js";
import { CLIENT_NAME, CLIENT_VERSION } from "./version.js";

const program = new Command()
  .name(CLIENT_NAME)
  .description("Pair this machine with an app that uses svc, then serve its runs on your own compute.")
  .version(CLIENT_VERSION)
  .option("--config-dir <dir>", "where settings and the pairing token are kept (default: $SVC_WORKER_HOME or ~/.config/svc-worker)");

const url = (value: string) => {
  try {
    const u = new URL(value);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error();
    return value.replace(/\/+$/, "");
  } catch {
    throw new InvalidArgumentError("must be an http(s) URL, e.g. https://svc.example.com");
  }
};

program
  .command("pair")
  .description("Pair this machine: prints a code to enter on the app's connect page, then waits for your approval.")
  .option("--connect-key <pk>", "the app's connect key, pk_svc_... (from the pairing command the app shows)")
  .option("--server <url>", "the service's URL, from the same command", url)
  .action(async (opts: { connectKey?: string; server?: string }) => {
    const store = new Store(configDir(program.opts().configDir, process.env));
    const settings = store.readSettings();
    const server = opts.server ?? settings.server;
    const connectKey = opts.connectKey ?? settings.connectKey;
    if (!server || !connectKey) {
      program.error(`${CLIENT_NAME} pair needs --connect-key and --server (or both in ${store.settingsPath}). Copy the pairing command from the app's "Connect a machine" page.`, { exitCode: 2 });
    }
    const abort = new AbortController();
    const onSignal = () => abort.abort();
    process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
    try {
      const result = await pair({ server: server!, connectKey: connectKey!, store, print: (l) => process.stdout.write(`${l}\n`), signal: abort.signal });
      process.exitCode = result.ok ? 0 : 1;
    } catch (err) {
      if (!abort.signal.aborted) throw err;
      process.stdout.write("Stopped; nothing was paired.\n");
      process.exitCode = 130;
    }
  });

/** The pairing this machine holds, or a clear exit when there is none. */
function paired(store: Store) {
  const credentials = store.readCredentials();
  if (!credentials) program.error(`This machine is not paired yet (no ${store.credentialsPath}). Run the pairing command from the app's "Connect a machine" page first.`, { exitCode: 1 });
  return credentials!;
}

const storeOf = () => new Store(configDir(program.opts().configDir, process.env));
const out = (line: string) => process.stdout.write(`${line}\n`);

/** Finds the runtimes (settings, with `--workdir` over them) and prints a line for each found and each skipped. */
async function findRuntimes(store: Store, workdir: string | undefined, verb: string) {
  const { runtimes, unsupported, notes } = await discoverRuntimes({ ...store.readSettings(), ...(workdir ? { workdir } : {}) });
  for (const r of runtimes) {
    const paidBy = { api_key: "billed to the provider API key", local_model: "on your own model", subscription: "billed to the subscription" }[r.advert.billing ?? "subscription"];
    const agent = r.advert.kind === "agent" ? `, ${r.advert.version ?? "version unknown"}, ${paidBy}` : "";
    out(`  ${verb} ${r.advert.name} (${r.advert.kind}, ${r.advert.costClass}${agent})${r.advert.models.length ? `: ${r.advert.models.join(", ")}` : ""}; ${r.advert.maxConcurrentJobs} job(s) at once`);
  }
  for (const n of notes) out(`  skips ${n}`);
  out(`  policy: ${policySummary(store.readSettings().policy ?? defaultPolicy())} (svc-worker policy shows and changes it)`);
  return { runtimes, unsupported };
}

program
  .command("start")
  .description("Connect to the service and serve this machine's runtimes; one line per job.")
  .option("--workdir <dir>", "the folder coding agents (Claude Code, Codex) work in, and never outside of")
  .action(async (opts: { workdir?: string }) => {
    const store = storeOf();
    const credentials = paired(store);
    const lock = lockServing(store.dir);
    if (!lock.ok) program.error(`Another svc-worker (pid ${lock.pid}) is already serving this machine from ${store.dir}.`, { exitCode: 1 });
    out(`${CLIENT_NAME} ${CLIENT_VERSION}: machine ${credentials.machineId} of ${credentials.appName} (${credentials.environment}).`);
    const { runtimes, unsupported } = await findRuntimes(store, opts.workdir, "serves");
    const abort = new AbortController();
    process.once("SIGINT", () => abort.abort()).once("SIGTERM", () => abort.abort());
    const policyNow = () => machinePolicy(store.readSettings().policy ?? defaultPolicy());
    // The policy, an agent CLI or the sandbox changed while serving: found again and said to the service, no restart needed.
    const watch = (apply: (next: Served) => void) =>
      watchServed(
        () => servedFingerprint(store),
        async () => {
          out("Your settings, an agent CLI or the sandbox changed; looking again:");
          try {
            const found = await findRuntimes(store, opts.workdir, "serves");
            apply({ runtimes: found.runtimes, unsupported: found.unsupported, policy: policyNow() });
          } catch (err) {
            out(`  could not look again (${(err as Error).message}); still serving what was found before`);
          }
        },
        abort.signal,
      );
    // Kept sessions past the user's sessions.keepDays: forgotten now, then hourly while serving.
    const expiry = new AbortController();
    expireSessionsWhileServing(store, policyNow, out, AbortSignal.any([abort.signal, expiry.signal]));
    const end = await serve({ credentials, runtimes, unsupported, print: out, signal: abort.signal, policy: policyNow(), jobsDir: path.join(store.dir, "jobs"), watch, sessions: new SessionBook(store.dir) });
    expiry.abort();
    if (end.reason === "stopped") {
      out("Stopped.");
      return;
    }
    out(`✗ ${end.reason === "revoked" ? `This machine was removed from ${credentials.appName}` : "The service refused this machine's token"}: ${end.message}. Pair it again to use it.`);
    process.exitCode = 1;
  });

program
  .command("status")
  .description("Show the pairing, the runtimes found here, and whether the service still takes this machine's token.")
  .option("--workdir <dir>", "as for start")
  .action(async (opts: { workdir?: string }) => {
    const store = storeOf();
    const credentials = store.readCredentials();
    if (!credentials) {
      out("Not paired.");
      process.exitCode = 1;
      return;
    }
    out(`Paired with ${credentials.appName} (${credentials.environment}) as ${credentials.machineId} since ${credentials.pairedAt}.`);
    out(`Server: ${credentials.server}`);
    await findRuntimes(store, opts.workdir, "can serve");
    const check = await checkToken(credentials);
    out(`Token: ${check}`);
    if (check !== "accepted") process.exitCode = 1;
  });

program
  .command("unpair")
  .description("Remove this machine from the app, forget its token here, and forget every kept agent CLI session.")
  .action(async () => {
    const store = storeOf();
    const credentials = paired(store);
    const remote = await unpairRemotely(credentials);
    store.removeCredentials();
    if (remote.ok) out(`✓ Unpaired: ${credentials.machineId} is removed from ${credentials.appName} and its token is forgotten here.`);
    else {
      out(`Forgot the token here, but the service could not be told (${remote.message}): remove the machine on the app's "Connect a machine" page too.`);
      process.exitCode = 1;
    }
    forgetSessionsOnUnpair(store, out);
  });

registerPolicyCommand(program, storeOf, out);
registerSessionsCommand(program, storeOf, out);

await program.parseAsync(process.argv);
