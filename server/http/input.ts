import type { NextFunction, Request, Response } from "express";
import { ApiError } from "../errors.js";

/**
 * The URL's own checks, once for every route, before any route parses it: each
 * path segment and each query name and value must be valid percent-encoding of
 * UTF-8 (`%`, `%zz` and `%C3%28` are not) and may not hold a NUL character,
 * which no id holds and Postgres cannot store. Refused as `400 invalid_request`
 * in the envelope, never a 500 from a decoder or the database further in.
 */
export function urlInput() {
  return (req: Request, _res: Response, next: NextFunction) => {
    const url = req.url;
    const q = url.indexOf("?");
    const path = q < 0 ? url : url.slice(0, q);
    const problem = pathProblem(path) ?? (q < 0 ? null : queryProblem(url.slice(q + 1)));
    if (problem) return next(new ApiError("invalid_request", problem));
    next();
  };
}

function pathProblem(path: string): string | null {
  if (path.includes("\0")) return "The path holds a NUL character.";
  if (!path.includes("%")) return null;
  for (const segment of path.split("/")) {
    const decoded = percentDecoded(segment);
    if (decoded === null) return "The path holds a malformed percent-encoding (each % must start an escape of UTF-8, like %2F).";
    if (decoded.includes("\0")) return "The path holds a NUL character (%00).";
  }
  return null;
}

function queryProblem(query: string): string | null {
  for (const pair of query.split("&")) {
    const decoded = percentDecoded(pair.replace(/\+/g, " "));
    if (decoded === null) return "The query string holds a malformed percent-encoding (each % must start an escape of UTF-8, like %20).";
    if (decoded.includes("\0")) return "The query string holds a NUL character (%00).";
  }
  return null;
}

/** The percent-decoded text, or null when the encoding is malformed. */
function percentDecoded(text: string): string | null {
  if (!text.includes("%")) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}
