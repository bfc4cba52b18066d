import type { Response } from "express";
import { ApiError } from "../errors.js";
import type { Tenant } from "../keys/keys.js";

/**
 * How many event streams (a run's, a re-attach, a streamed chat completion) one
 * app and environment may hold open on this instance at once. Each open stream
 * holds a socket and up to a page or a capped buffer of events: without a bound,
 * one app opening streams it never reads could take the instance's memory from
 * every other app. Past it a new stream is refused before anything starts
 * (`429 rate_limited` with `Retry-After`), so a run start refused here created
 * nothing and may be retried.
 */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  constructor(readonly max: number) {}

  /** Takes a slot for `res` until it closes, or refuses. */
  take(tenant: Tenant, res: Response): void {
    const key = `${tenant.appId}/${tenant.environment}`;
    const held = this.open.get(key) ?? 0;
    if (held >= this.max) {
      throw new ApiError("rate_limited", `This app already has ${this.max} event streams open in its ${tenant.environment} environment (runs, re-attaches, streamed chat completions); close some or retry shortly.`, {
        headers: { "Retry-After": "1" },
      });
    }
    this.open.set(key, held + 1);
    res.once("close", () => {
      const left = (this.open.get(key) ?? 1) - 1;
      if (left > 0) this.open.set(key, left);
      else this.open.delete(key);
    });
  }

  /** Open streams of every app on this instance (the metrics). */
  total(): number {
    let n = 0;
    for (const held of this.open.values()) n += held;
    return n;
  }

  /** Open streams of one app and environment (for tests and diagnostics). */
  held(tenant: Tenant): number {
    return this.open.get(`${tenant.appId}/${tenant.environment}`) ?? 0;
  }
}
