import fs from "node:fs";
import http from "node:http";
import { dirname } from "node:path";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import { OperationError, runOperation, type OperationDeps } from "./operations.js";

/**
 * The server's admin socket: a Unix socket in the data folder (mode 0600), so
 * only the user owning the data folder can reach it; it is never on the network.
 * `POST /<operation>` with JSON arguments; answers `{result}` or `{error}`.
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
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const args = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : {};
      const op = (req.url ?? "/").slice(1);
      reply(200, { result: await runOperation(deps, op, args) });
    } catch (err) {
      if (err instanceof OperationError || err instanceof ApiError || err instanceof SyntaxError) return reply(400, { error: err.message });
      logger.error({ err }, "admin operation failed");
      reply(500, { error: "The operation failed; see the server's log." });
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
          else reject(new OperationError(body.error ?? `admin socket answered ${res.statusCode}`));
        } catch (err) {
          reject(err);
        }
      });
    });
    req.on("error", reject);
    req.end(JSON.stringify(args ?? {}));
  });
}
