import fs from "node:fs";
import http from "node:http";
import { dirname } from "node:path";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { OperationError, runOperation, type OperationDeps } from "./operations.js";

/**
 * The server's admin socket: a Unix socket in the data folder (mode 0600), so
 * only the user owning the data folder can reach it; it is never on the network.
 * `POST /<operation>` with JSON arguments; answers `{result}`, or an error in the
 * envelope every endpoint answers in (`{error:{type,code,message,requestId}}`).
 */
export async function startAdminSocket(path: string, deps: OperationDeps, logger: Logger): Promise<() => Promise<void>> {
  // Its folder is the data folder (0700) or a private one of its own.
  fs.mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  fs.rmSync(path, { force: true });
  const server = http.createServer(async (req, res) => {
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    const op = (req.url ?? "/").slice(1);
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const args = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : {};
      reply(200, { result: await runOperation(deps, op, args) });
    } catch (err) {
      // Answered in the envelope, with a request id logged with the failure.
      const requestId = randomId("req_", 20);
      const known = err instanceof ApiError ? err : err instanceof OperationError ? new ApiError("invalid_request", err.message) : err instanceof SyntaxError ? new ApiError("invalid_json", err.message) : null;
      if (known) logger.info({ requestId, op, code: known.code }, "admin operation refused");
      else logger.error({ err, requestId, op }, "admin operation failed");
      const answer = known ?? new ApiError("internal_error", "The operation failed; see the server's log.");
      reply(answer.status, answer.toEnvelope(requestId));
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => resolve());
  });
  fs.chmodSync(path, 0o600);
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      fs.rmSync(path, { force: true });
    });
}

/** Calls an operation on a running server's admin socket. */
export function callAdminSocket(path: string, op: string, args: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: path, method: "POST", path: `/${op}`, headers: { "content-type": "application/json" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          if (res.statusCode === 200) resolve(body.result);
          else reject(new OperationError(messageOf(body) ?? `admin socket answered ${res.statusCode}`));
        } catch (err) {
          reject(err);
        }
      });
    });
    req.on("error", reject);
    req.end(JSON.stringify(args ?? {}));
  });
}

/** An error answer's message: the envelope's (a server of an older version answered `{error: "<message>"}`). */
function messageOf(body: { error?: string | { message?: string } } | null): string | undefined {
  const error = body?.error;
  return typeof error === "string" ? error : error?.message;
}
