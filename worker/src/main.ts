import { Command, InvalidArgumentError } from "commander";
import { pair } from "./pair.js";
import { configDir, Store } from "./store.js";
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

await program.parseAsync(process.argv);
