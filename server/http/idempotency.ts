import { createHash } from "node:crypto";
import type { NextFunction, Request, Response } from "express";
import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** A repeat of a run start with the same `Idempotency-Key`: the run its first request started (the handler answers with that run). */
      idempotentRun?: string;
    }
  }
}

/** How long a key's answer is kept (Stripe's 24 hours). */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/** A first request with no answer by then is taken to be gone (its instance died): the key may be claimed again. */
const CLAIM_MS = 60_000;
/** How long a repeat waits for the first request's answer before it is told to retry (409 `idempotency_key_in_use`). */
const WAIT_MS = 10_000;
const POLL_MS = 100;
/** An answer larger than this is not kept (the key is released: a repeat runs again). POST answers are small JSON. */
const MAX_STORED_BODY_BYTES = 1024 * 1024;
/** Headers of the first answer given again with a repeat. */
const REPLAYED_HEADERS = ["content-type", "service-run-id", "retry-after", "location", "x-should-retry"];
const KEY = /^[\x21-\x7e]{1,255}$/;

interface KeyRow {
  fingerprint: string;
  state: "running" | "done";
  run_id: string | null;
  status: number | null;
  headers: Record<string, string> | null;
  body: string | null;
  claimed_until: Date;
  mine: boolean;
}

/**
 * `Idempotency-Key` on every POST (Stripe's semantics). The first request with a
 * key is handled and its answer kept for 24 hours; a repeat with the same key and
 * the same request (method, path, body) gets that answer again, marked
 * `Idempotent-Replayed: true`, on any instance (the key is a row). A run start's
 * repeat gets the same run: its stream from the first event (or its handback).
 * A repeat while the first is still being handled waits for it (up to 10 s, then
 * 409 `idempotency_key_in_use` with Retry-After); the same key with another
 * request is 409 `idempotency_key_reused`. Answers that say nothing happened
 * (429, 5xx) are not kept: the key is released and a retry runs again. Without
 * the header nothing changes: a POST is not idempotent.
 *
 * Keys are scoped to the credential: its app and environment, and for a session
 * its end user. A POST without a credential (the device flow) ignores the header.
 */
export function idempotency(db: Sql, clock: Clock) {
  let lastPurge = 0;
  return async (req: Request, res: Response, next: NextFunction) => {
    try {
      const key = req.get("idempotency-key");
      if (req.method !== "POST" || key === undefined) return next();
      const scope = scopeOf(req);
      if (scope === null) return next();
      if (!KEY.test(key)) throw new ApiError("invalid_request", "Invalid header `Idempotency-Key`: 1 to 255 visible ASCII characters.", { param: "Idempotency-Key" });
      const fingerprint = createHash("sha256").update(`${req.method} ${req.originalUrl}\n${JSON.stringify(req.body ?? null)}`).digest("hex");

      const now = clock.now().getTime();
      if (now - lastPurge > 60_000) {
        lastPurge = now;
        db.query(`DELETE FROM idempotency_keys WHERE expires_at < $1`, [new Date(now)]).catch(() => {});
      }

      // Real time, not the service clock: a wait is a wait whatever the clock says.
      const deadline = Date.now() + WAIT_MS;
      for (;;) {
        const row = await claim(db, clock, scope, key, fingerprint);
        if (row.mine) return record(db, scope, key, req, res, next);
        if (row.fingerprint !== fingerprint) throw new ApiError("idempotency_key_reused", `Idempotency-Key ${JSON.stringify(key)} was used with another request (method, path or body) in the last 24 hours: use a new key for a new request.`);
        res.setHeader("Idempotent-Replayed", "true");
        if (row.state === "done" && row.body !== null) {
          for (const [name, value] of Object.entries(row.headers ?? {})) res.setHeader(name, value);
          return res.status(row.status!).send(withRequestId(row.body, req.id));
        }
        if (row.run_id) {
          // A run start still going, or streamed: the handler answers with the run the first request started (its stream from the first event).
          req.idempotentRun = row.run_id;
          return next();
        }
        if (Date.now() >= deadline) {
          throw new ApiError("idempotency_key_in_use", `A request with Idempotency-Key ${JSON.stringify(key)} is still being handled: retry after the time in Retry-After.`, { headers: { "Retry-After": "1" } });
        }
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
    } catch (err) {
      next(err);
    }
  };
}

/** An error envelope given again names this request's id (the one in its `Request-Id` header), as every envelope does. */
function withRequestId(body: string, requestId: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { requestId?: string } };
    if (parsed && typeof parsed.error === "object" && parsed.error !== null && "requestId" in parsed.error) {
      parsed.error.requestId = requestId;
      return JSON.stringify(parsed);
    }
  } catch {
    /* not JSON: given as it was */
  }
  return body;
}

/** Whose key it is: the credential's app and environment (and a session's user); null without a credential. */
function scopeOf(req: Request): string | null {
  const p = req.principal;
  if (p?.kind === "appKey") return `app:${p.appId}:${p.environment}`;
  if (p?.kind === "connectKey") return `connect:${p.appId}:${p.environment}`;
  if (p?.kind === "session") return `session:${p.appId}:${p.environment}:${p.endUserId}`;
  if (p?.kind === "owner") return `owner:${p.ownerId}`;
  return null;
}

/**
 * One statement: the key claimed for this request (new, expired, or a running claim
 * whose owner is gone), or the row of the request that holds it.
 */
async function claim(db: Sql, clock: Clock, scope: string, key: string, fingerprint: string): Promise<KeyRow> {
  const now = clock.now();
  const [row] = await db.query<KeyRow>(
    `WITH mine AS (
       INSERT INTO idempotency_keys AS k (scope, key, fingerprint, state, claimed_until, created_at, expires_at)
       VALUES ($1, $2, $3, 'running', $5, $4, $6)
       ON CONFLICT (scope, key) DO UPDATE
         SET fingerprint = EXCLUDED.fingerprint, state = 'running', run_id = NULL, status = NULL, headers = NULL, body = NULL,
             claimed_until = EXCLUDED.claimed_until, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
         WHERE k.expires_at <= $4 OR (k.state = 'running' AND k.run_id IS NULL AND k.claimed_until <= $4)
       RETURNING k.fingerprint, k.state, k.run_id, k.status, k.headers, k.body, k.claimed_until, true AS mine
     )
     SELECT * FROM mine
     UNION ALL
     SELECT fingerprint, state, run_id, status, headers, body, claimed_until, false AS mine FROM idempotency_keys
      WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM mine)`,
    [scope, key, fingerprint, now, new Date(now.getTime() + CLAIM_MS), new Date(now.getTime() + IDEMPOTENCY_TTL_MS)],
  );
  // Neither inserted nor found: the holder released it between the two reads; the caller tries again.
  return row ?? { fingerprint, state: "running", run_id: null, status: null, headers: null, body: null, claimed_until: now, mine: false };
}

/**
 * Handles the request that holds the key, keeping its answer: a run's id as soon
 * as its headers name it (a repeat then re-attaches to that run), the status,
 * headers and body once it is answered. A 429 or 5xx releases the key.
 */
function record(db: Sql, scope: string, key: string, req: Request, res: Response, next: NextFunction): void {
  const chunks: Buffer[] = [];
  let size = 0;
  // A stream (a run's events) is not kept: a repeat re-attaches to its run instead.
  let streaming = false;
  let settled = false;
  const settle = (sql: string, params: unknown[]) => {
    if (settled) return;
    settled = true;
    db.query(sql, [scope, key, ...params]).catch((err) => req.log.warn({ err }, "idempotency key not recorded"));
  };
  const release = () => settle(`DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND state = 'running'`, []);

  const writeHead = res.writeHead;
  res.writeHead = function (this: Response, ...args: unknown[]) {
    const status = typeof args[0] === "number" ? args[0] : res.statusCode;
    const runId = res.getHeader("service-run-id");
    streaming = String(res.getHeader("content-type") ?? "").startsWith("text/event-stream");
    if (typeof runId === "string" && status < 500 && status !== 429) {
      // Kept at once (not awaited): a repeat arriving meanwhile waits for it.
      db.query(`UPDATE idempotency_keys SET run_id = $3 WHERE scope = $1 AND key = $2`, [scope, key, runId]).catch((err) => req.log.warn({ err }, "idempotency key's run not recorded"));
    }
    return (writeHead as (...a: unknown[]) => Response).apply(this, args);
  } as typeof res.writeHead;

  const write = res.write;
  res.write = function (this: Response, chunk: unknown, ...rest: unknown[]) {
    collect(chunk);
    return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
  } as typeof res.write;
  const end = res.end;
  res.end = function (this: Response, chunk?: unknown, ...rest: unknown[]) {
    if (typeof chunk !== "function") collect(chunk);
    const status = res.statusCode;
    const runId = res.getHeader("service-run-id");
    if (status >= 500 || status === 429 || ((streaming || size > MAX_STORED_BODY_BYTES) && typeof runId !== "string")) release();
    else {
      const headers: Record<string, string> = {};
      for (const name of REPLAYED_HEADERS) {
        const v = res.getHeader(name);
        if (v !== undefined) headers[name] = String(v);
      }
      const body = streaming || size > MAX_STORED_BODY_BYTES ? null : Buffer.concat(chunks).toString("utf8");
      settle(
        `UPDATE idempotency_keys SET state = 'done', status = $3, headers = $4::jsonb, body = $5, run_id = COALESCE(run_id, $6) WHERE scope = $1 AND key = $2`,
        [status, JSON.stringify(headers), body, typeof runId === "string" ? runId : null],
      );
    }
    return (end as (...a: unknown[]) => Response).call(this, chunk, ...rest);
  } as typeof res.end;
  // The client left mid-stream: the run goes on, and a repeat re-attaches to it. A client that left
  // before any answer changes nothing here: the handler still answers (into the void) and that answer
  // is kept; one that never answers leaves a claim another request takes over after CLAIM_MS.
  res.on("close", () => {
    if (!res.writableEnded && typeof res.getHeader("service-run-id") === "string") settle(`UPDATE idempotency_keys SET state = 'done' WHERE scope = $1 AND key = $2`, []);
  });

  function collect(chunk: unknown) {
    if (streaming || chunk === undefined || chunk === null || size > MAX_STORED_BODY_BYTES) return;
    const b = typeof chunk === "string" ? Buffer.from(chunk) : Buffer.isBuffer(chunk) ? chunk : chunk instanceof Uint8Array ? Buffer.from(chunk) : null;
    if (!b) return;
    size += b.length;
    if (size <= MAX_STORED_BODY_BYTES) chunks.push(b);
  }
  next();
}
