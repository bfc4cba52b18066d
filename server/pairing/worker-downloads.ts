import semver from "semver";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
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

/** After a failed build, how long downloads are refused before one tries to build again. */
const RETRY_BUILD_SECONDS = 60;

/** Each file is fixed by its version: cached anywhere for a year, never revalidated. */
const IMMUTABLE_HEADERS = {
  "Cache-Control": "public, max-age=31536000, immutable",
  "X-Content-Type-Options": "nosniff",
  // Bytes to save, never to render or run in a page of this origin.
  "Content-Security-Policy": "default-src 'none'; sandbox",
  "Cross-Origin-Resource-Policy": "same-origin",
};

/**
 * `GET /worker/svc-worker-<version>.tgz` and `GET /worker/svc-worker-<version>.mjs`:
 * the worker of exactly the version this service speaks (worker-release.ts), as
 * static, immutable files. The routes are the two fixed paths of that version,
 * nothing from a request ever names a file, and the bytes are served from memory.
 * `/worker/svc-worker.tgz` and `/worker/svc-worker.mjs` redirect to them (not cached).
 */
export function workerDownloadsRouter(log: Logger, dir = RELEASE_DIR): { router: Router; paths: string[] } {
  const version = workerVersion();
  const files = releaseFiles(version);
  let loading: Promise<LoadedRelease> | null = null;
  /** When a build last failed: downloads meanwhile are refused at once, so a stranger's requests cannot start a build each. */
  let failedAt = 0;
  const unavailable = () => new ApiError("service_unavailable", "The worker's files are not available right now; try again in a minute.", { headers: { "Retry-After": String(RETRY_BUILD_SECONDS) } });
  const release = () => {
    if (!loading && Date.now() - failedAt < RETRY_BUILD_SECONDS * 1000) return Promise.reject(unavailable());
    loading ??= loadWorkerRelease(dir).catch((err) => {
      // Not kept: a download after RETRY_BUILD_SECONDS tries again.
      loading = null;
      failedAt = Date.now();
      log.error({ err }, "the worker's files could not be built");
      throw unavailable();
    });
    return loading;
  };

  // Case-sensitive: one spelling per file. Not strict, like the route fallback: a trailing slash is the same path.
  const router = express.Router({ caseSensitive: true });
  const serve = (kind: "package" | "singleFile", type: string) => (req: Request, res: Response, next: NextFunction) => {
    release().then((loaded) => {
      const file = loaded.manifest[kind];
      res.set({ ...IMMUTABLE_HEADERS, ETag: `"${file.sha256}"`, "Content-Disposition": `attachment; filename="${file.name}"` });
      if (req.fresh) return void res.status(304).end();
      res.type(type).send(loaded[kind]);
    }, next);
  };
  const paths = {
    package: `${WORKER_DOWNLOADS_PATH}/${files.package}`,
    singleFile: `${WORKER_DOWNLOADS_PATH}/${files.singleFile}`,
    latestPackage: `${WORKER_DOWNLOADS_PATH}/svc-worker.tgz`,
    latestSingleFile: `${WORKER_DOWNLOADS_PATH}/svc-worker.mjs`,
  };
  router.get(paths.package, serve("package", "application/gzip"));
  router.get(paths.singleFile, serve("singleFile", "text/javascript; charset=utf-8"));
  for (const [from, to] of [
    [paths.latestPackage, paths.package],
    [paths.latestSingleFile, paths.singleFile],
  ]) {
    router.get(from, (_req, res) => {
      // Relative, so it holds behind any proxy; the target is the immutable file.
      res.set({ "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff" }).redirect(302, `./${to.slice(WORKER_DOWNLOADS_PATH.length + 1)}`);
    });
  }
  return { router, paths: Object.values(paths) };
}
