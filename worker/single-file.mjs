// The entry of the single-file build (`svc-worker-<version>.mjs`, run with plain `node`):
// the CLI, or, when started with the helper flag (src/layout.ts), one of the helper
// scripts the worker starts as separate processes, since the file is all there is.
const HELPER_FLAG = "--svc-worker-helper=";
const first = process.argv[2] ?? "";
if (first.startsWith(HELPER_FLAG)) {
  const helper = first.slice(HELPER_FLAG.length);
  // The helper reads its own arguments from argv[2] on, as when it runs as its own script.
  process.argv.splice(2, 1);
  if (helper === "mcp-bridge") await import("./src/mcp/bridge-server.ts");
  else if (helper === "forwarder") await import("./src/policy/forwarder.mjs");
  else {
    process.stderr.write(`unknown helper ${JSON.stringify(helper)}\n`);
    process.exit(2);
  }
} else {
  await import("./src/main.ts");
}
