// `npm run build:worker` (and the root postinstall): builds the worker files the service serves at
// /worker/ (server/pairing/worker-release.ts) into worker/release/, unless they are already this tree's build.
import { buildWorkerRelease, currentManifest, loadWorkerRelease, RELEASE_DIR } from "../server/pairing/worker-release.js";

const force = process.argv.includes("--force");
const started = Date.now();
const fresh = !force && currentManifest() !== null;
const { manifest } = force ? { manifest: await buildWorkerRelease() } : await loadWorkerRelease();
const kb = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
process.stdout.write(
  `svc-worker ${manifest.version} ${fresh ? "is already built" : `built in ${((Date.now() - started) / 1000).toFixed(1)} s`} in ${RELEASE_DIR}: ` +
    `${manifest.package.name} (${kb(manifest.package.size)}), ${manifest.singleFile.name} (${kb(manifest.singleFile.size)})\n`,
);
