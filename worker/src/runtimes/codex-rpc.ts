import type { ChildProcessWithoutNullStreams } from "node:child_process";
import readline from "node:readline";

type Id = number | string;
interface RpcError {
  code: number;
  message: string;
}

/**
 * The client side of `codex app-server`'s JSON-RPC over stdio: one JSON object
 * per line each way. Requests we send are answered by id; notifications and
 * the server's own requests (approvals) go to the handlers. Lines that are not
 * JSON are skipped.
 */
export class CodexRpc {
  private nextId = 1;
  private readonly waiting = new Map<Id, { resolve: (r: unknown) => void; reject: (e: Error) => void }>();

  constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    handlers: {
      notification: (method: string, params: Record<string, unknown>) => void;
      request: (id: Id, method: string, params: Record<string, unknown>) => void;
    },
  ) {
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      let m: { id?: Id; method?: string; params?: Record<string, unknown>; result?: unknown; error?: RpcError };
      try {
        m = JSON.parse(line);
      } catch {
        return;
      }
      if (!m || typeof m !== "object") return;
      if (m.method !== undefined && m.id !== undefined) return handlers.request(m.id, m.method, m.params ?? {});
      if (m.method !== undefined) return handlers.notification(m.method, m.params ?? {});
      if (m.id === undefined) return;
      const w = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (m.error) w?.reject(new Error(`${m.error.message} (${m.error.code})`));
      else w?.resolve(m.result);
    });
    child.on("exit", () => {
      for (const w of this.waiting.values()) w.reject(new Error("codex app-server exited"));
      this.waiting.clear();
    });
  }

  request<T>(method: string, params: unknown): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (r: unknown) => void, reject });
      this.write({ id, method, params });
    });
  }

  notify(method: string, params?: unknown): void {
    this.write({ method, ...(params === undefined ? {} : { params }) });
  }

  respond(id: Id, result: unknown): void {
    this.write({ id, result });
  }

  respondError(id: Id, message: string): void {
    this.write({ id, error: { code: -32601, message } });
  }

  private write(message: Record<string, unknown>): void {
    if (this.child.stdin.writable) this.child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", ...message })}\n`);
  }
}
