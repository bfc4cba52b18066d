import express, { type NextFunction, type Request, type Response } from "express";
import { ApiError } from "../errors.js";

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** The body's exact bytes, kept only where a signature is checked over them (Stripe's webhook). */
      rawBody?: Buffer;
    }
  }
}

/** Routes whose signature covers the raw body: it is kept as received, next to the parsed JSON. */
const RAW_BODY_PATHS = new Set(["/v1/stripe/webhook", "/v1/stripe/webhook/"]);

/**
 * JSON bodies only: a body in any other media type is 415, malformed JSON 400,
 * too large 413 (mapped in the error handler). An empty body is fine for routes
 * whose body is optional; the contract's schema decides the rest.
 */

export function jsonBody(maxBytes: number) {
  const parse = express.json({
    limit: maxBytes,
    strict: true,
    type: () => true,
    verify: (req: Request, _res, buf) => {
      if (RAW_BODY_PATHS.has(req.path)) req.rawBody = buf;
      // Only a `\u` escape can put a NUL or an unpaired surrogate in a parsed string (raw ones are invalid JSON or UTF-8).
      if (buf.includes(ESCAPE)) escaped.add(req);
    },
  });
  // Postgres stores text and JSON without NUL characters or unpaired surrogates: refused here as bad JSON (400), never a failed write (500).
  const checked = (req: Request, next: NextFunction) => (err?: unknown) => {
    if (err || !escaped.has(req)) return next(err);
    if (holdsUnstorable(req.body)) return next(new ApiError("invalid_json", "The request body is not valid JSON here: strings may not hold a NUL character (\\u0000) or an unpaired surrogate."));
    next();
  };
  return (req: Request, res: Response, next: NextFunction) => {
    if (!hasBody(req)) return next();
    const type = req.headers["content-type"];
    if (!type || !/^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(type)) {
      return next(new ApiError("unsupported_media_type", `The request body must be application/json${type ? `, not ${type.split(";")[0]}` : ""}.`));
    }
    parse(req, res, checked(req, next));
  };
}

/** A NUL character, or a surrogate without its pair. */
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const ESCAPE = Buffer.from("\\u");
const escaped = new WeakSet<Request>();

function holdsUnstorable(value: unknown): boolean {
  if (typeof value === "string") return UNSTORABLE.test(value);
  if (Array.isArray(value)) return value.some(holdsUnstorable);
  if (value !== null && typeof value === "object") return Object.entries(value).some(([k, v]) => UNSTORABLE.test(k) || holdsUnstorable(v));
  return false;
}

function hasBody(req: Request): boolean {
  const length = req.headers["content-length"];
  if (length !== undefined) return Number(length) > 0;
  return req.headers["transfer-encoding"] !== undefined;
}
