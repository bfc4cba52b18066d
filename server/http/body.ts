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

export function jsonBody(maxBytes: number, maxDepth: number = DEFAULT_MAX_BODY_DEPTH) {
  const parse = express.json({
    limit: maxBytes,
    strict: true,
    type: () => true,
    verify: (req: Request, _res, buf) => {
      // Before parsing, on the bytes, without recursion: nothing nested deeper than `maxDepth` reaches code that walks values recursively.
      if (nestingExceeds(buf, maxDepth)) throw Object.assign(new Error(`The request body is nested more than ${maxDepth} levels deep.`), { type: "entity.too.deep" });
      if (RAW_BODY_PATHS.has(req.path)) req.rawBody = buf;
      // Only a `\u` escape can put a NUL or an unpaired surrogate in a parsed string (raw ones are invalid JSON or UTF-8).
      if (buf.includes(ESCAPE)) escaped.add(req);
    },
  });
  // Postgres stores text and JSON without NUL characters or unpaired surrogates: refused here as bad JSON (400), never a failed write (500).
  const checked = (req: Request, next: NextFunction) => (err?: unknown) => {
    if (err || !escaped.has(req)) return next(err);
    // This runs in body-parser's stream callback, where a throw would escape Express: anything thrown goes to next().
    try {
      if (holdsUnstorable(req.body)) return next(new ApiError("invalid_json", "The request body is not valid JSON here: strings may not hold a NUL character (\\u0000) or an unpaired surrogate."));
    } catch (thrown) {
      return next(thrown);
    }
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

/** Does any string (key or value) in `value` hold what Postgres cannot store? Walks with its own stack, never the call stack. */
export function holdsUnstorable(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (UNSTORABLE.test(v)) return true;
    } else if (Array.isArray(v)) {
      for (const item of v) stack.push(item);
    } else if (v !== null && typeof v === "object") {
      for (const [k, item] of Object.entries(v)) {
        if (UNSTORABLE.test(k)) return true;
        stack.push(item);
      }
    }
  }
  return false;
}

/** How deep a JSON body may nest objects and arrays (`MAX_BODY_DEPTH`). */
export const DEFAULT_MAX_BODY_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const OPEN_ARRAY = 0x5b;
const CLOSE_OBJECT = 0x7d;
const CLOSE_ARRAY = 0x5d;

/**
 * Does the JSON text in `buf` open more than `max` objects or arrays inside each
 * other? One pass over the bytes (brackets inside strings do not count; UTF-8's
 * multi-byte sequences never hold ASCII bytes). Malformed JSON is left to the parser.
 */
export function nestingExceeds(buf: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const b = buf[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) inString = true;
    else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (++depth > max) return true;
    } else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) depth--;
  }
  return false;
}

function hasBody(req: Request): boolean {
  const length = req.headers["content-length"];
  if (length !== undefined) return Number(length) > 0;
  return req.headers["transfer-encoding"] !== undefined;
}
