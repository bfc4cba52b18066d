import { AsyncLocalStorage } from "node:async_hooks";
import type { Request, Response } from "express";

/**
 * The request whose work is running, wherever that work has got to (callbacks,
 * promises, stream events), and how many statements it has sent to the database.
 * One store for both: an exception escaping into the process's handlers is logged
 * with its request id and answered 500 instead of stopping the process, and a 503
 * of a request that sent nothing says that nothing was created.
 */
export interface RequestScope {
  req: Request;
  res: Response;
  /** Statements sent to the database so far (counted by the Postgres pool's clients). */
  statements: number;
  /** Where its time went so far, in milliseconds, for its `Server-Timing` header (server/http/server-timing.ts). */
  timing: RequestTiming;
}

export interface RequestTiming {
  db: number;
  machine: number;
}

export const requestScope = new AsyncLocalStorage<RequestScope>();
