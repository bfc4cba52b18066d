// Puts the service's own `svc` CLI in node_modules/.bin, as npm does for a dependency's bins: `npx svc`
// then runs it straight away. npm does not link a project's own bin, so without this `npx svc` first
// "installs" this folder into its cache (reading the whole node_modules tree: seconds, on every call).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const binDir = path.join(root, "node_modules", ".bin");
const link = path.join(binDir, "svc");
try {
  fs.mkdirSync(binDir, { recursive: true });
  fs.rmSync(link, { force: true });
  fs.symlinkSync(path.relative(binDir, path.join(root, "bin", "svc.js")), link);
} catch (err) {
  // Where links cannot be made (a Windows account without the right), `npx svc` still works, only slower.
  console.warn(`svc: could not link node_modules/.bin/svc (${err.message}); npx svc will find the CLI the slow way.`);
}
