import semver from "semver";
import type { Router } from "express";
import type { Logger } from "../logger.js";
import { releaseRouter } from "../downloads/release-router.js";
import { loadWorkerRelease, releaseFiles, RELEASE_DIR, WORKER_PACKAGE, workerVersion, type LoadedRelease } from "./worker-release.js";

/** Where the service serves its worker. */
export const WORKER_DOWNLOADS_PATH = "/worker";

/** The URLs of the worker this service speaks, under its public base URL. */
export function workerDownloads(base: string, version = workerVersion()) {
  const files = releaseFiles(version);
  return {
    version,
    /** The npm package: `npx --yes <packageUrl> ...`. */
    packageUrl: `${base}${WORKER_DOWNLOADS_PATH}/${files.package}`,
    /** The single file: `node <file> ...`. */
    scriptUrl: `${base}${WORKER_DOWNLOADS_PATH}/${files.singleFile}`,
  };
}

/**
 * What `welcome` tells a worker about updating: where to get the version this
 * service speaks, when the hello came from our own worker (`svc-worker`) at an
 * older version (semver order; a version that is not semver is left alone).
 */
export function workerUpdateFor(base: string, client: string, clientVersion: string, version = workerVersion()): ReturnType<typeof workerDownloads> | undefined {
  if (client !== WORKER_PACKAGE || !semver.valid(clientVersion) || !semver.lt(clientVersion, version)) return undefined;
  return workerDownloads(base, version);
}

/**
 * `GET /worker/svc-worker-<version>.tgz` and `GET /worker/svc-worker-<version>.mjs`:
 * the worker of exactly the version this service speaks (worker-release.ts), as
 * static, immutable files (server/downloads/release-router.ts).
 * `/worker/svc-worker.tgz` and `/worker/svc-worker.mjs` redirect to them (not cached).
 */
export function workerDownloadsRouter(log: Logger, dir = RELEASE_DIR): { router: Router; paths: string[] } {
  const files = releaseFiles(workerVersion());
  return releaseRouter<LoadedRelease>(log, "The worker's files", () => loadWorkerRelease(dir), [
    { path: `${WORKER_DOWNLOADS_PATH}/${files.package}`, latest: `${WORKER_DOWNLOADS_PATH}/svc-worker.tgz`, type: "application/gzip", pick: (l) => ({ file: l.manifest.package, bytes: l.package }) },
    { path: `${WORKER_DOWNLOADS_PATH}/${files.singleFile}`, latest: `${WORKER_DOWNLOADS_PATH}/svc-worker.mjs`, type: "text/javascript; charset=utf-8", pick: (l) => ({ file: l.manifest.singleFile, bytes: l.singleFile }) },
  ]);
}
