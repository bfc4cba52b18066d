import express, { type NextFunction, type Request, type Response, type Router } from "express";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import type { ReleaseFile } from "./release-files.js";

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

/** One file served: its versioned path, the unversioned path that redirects to it, its type, and where it is in a loaded build. */
export interface ServedFile<L> {
  path: string;
  latest: string;
  type: string;
  pick(loaded: L): { file: ReleaseFile; bytes: Buffer };
}

/**
 * Files of one build (the worker's, the SDK's) as static, immutable downloads: the
 * routes are fixed paths of this version, nothing from a request ever names a file,
 * the bytes are served from memory, and each unversioned path redirects to its
 * versioned one (not cached). The build is loaded on the first download; one that
 * failed refuses downloads for a minute (503 with `Retry-After`), so a stranger's
 * requests cannot start a build each.
 */
export function releaseRouter<L>(log: Logger, what: string, load: () => Promise<L>, files: ServedFile<L>[]): { router: Router; paths: string[] } {
  let loading: Promise<L> | null = null;
  /** When a build last failed. */
  let failedAt = 0;
  const unavailable = () => new ApiError("service_unavailable", `${what} is not available right now; try again in a minute.`, { headers: { "Retry-After": String(RETRY_BUILD_SECONDS) } });
  const release = () => {
    if (!loading && Date.now() - failedAt < RETRY_BUILD_SECONDS * 1000) return Promise.reject(unavailable());
    loading ??= load().catch((err) => {
      // Not kept: a download after RETRY_BUILD_SECONDS tries again.
      loading = null;
      failedAt = Date.now();
      log.error({ err }, `${what} could not be built`);
      throw unavailable();
    });
    return loading;
  };

  // Case-sensitive: one spelling per file. Not strict, like the route fallback: a trailing slash is the same path.
  const router = express.Router({ caseSensitive: true });
  for (const f of files) {
    router.get(f.path, (req: Request, res: Response, next: NextFunction) => {
      release().then((loaded) => {
        const { file, bytes } = f.pick(loaded);
        res.set({ ...IMMUTABLE_HEADERS, ETag: `"${file.sha256}"`, "Content-Disposition": `attachment; filename="${file.name}"` });
        if (req.fresh) return void res.status(304).end();
        res.type(f.type).send(bytes);
      }, next);
    });
    router.get(f.latest, (_req, res) => {
      // Relative, so it holds behind any proxy; the target is the immutable file.
      res.set({ "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff" }).redirect(302, `./${f.path.slice(f.path.lastIndexOf("/") + 1)}`);
    });
  }
  return { router, paths: files.flatMap((f) => [f.path, f.latest]) };
}
