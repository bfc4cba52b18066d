import WebSocket from "ws";
import { WORKER_CONNECT_PATH, type ServerMessage } from "@svc/contract";

/**
 * A raw worker connection, no svc-worker in between: a test double speaking the
 * real protocol over a real WebSocket with a real pairing token.
 */
export interface RawWorker {
  ws: WebSocket;
  /** Messages received and not yet taken by `next`. */
  pending: ServerMessage[];
  /** The next message of this type not taken yet (waits for it). */
  next<T extends ServerMessage["type"]>(type: T, timeoutMs?: number): Promise<Extract<ServerMessage, { type: T }>>;
  send(message: unknown): void;
  /** Sends and resolves once the socket's buffer took it (for floods: never more than `highWater` bytes queued). */
  sendPaced(message: unknown, highWater?: number): Promise<void>;
  /** Resolves when the socket closes, with the code and reason. */
  closed: Promise<{ code: number; reason: string }>;
}

/** Opens a worker connection with the token in the Authorization header; resolves once open. */
export async function connectRawWorker(baseUrl: string, token: string, open: WebSocket[] = []): Promise<RawWorker> {
  const ws = new WebSocket(`${baseUrl.replace(/^http/, "ws")}${WORKER_CONNECT_PATH}`, { headers: { authorization: `Bearer ${token}` }, maxPayload: 64 * 1024 * 1024 });
  open.push(ws);
  const pending: ServerMessage[] = [];
  const waiters: { type: string; resolve: (m: ServerMessage) => void }[] = [];
  ws.on("message", (data) => {
    const message = JSON.parse(data.toString("utf8")) as ServerMessage;
    const i = waiters.findIndex((w) => w.type === message.type);
    if (i >= 0) waiters.splice(i, 1)[0].resolve(message);
    else pending.push(message);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`the handshake answered ${res.statusCode}`)));
  });
  ws.on("error", () => {});
  return {
    ws,
    pending,
    closed,
    send: (message) => ws.send(typeof message === "string" ? message : JSON.stringify(message)),
    sendPaced: async (message, highWater = 4 * 1024 * 1024) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(typeof message === "string" ? message : JSON.stringify(message));
      while (ws.readyState === WebSocket.OPEN && ws.bufferedAmount > highWater) await new Promise((r) => setTimeout(r, 5));
    },
    next: (type, timeoutMs = 10_000) => {
      const i = pending.findIndex((p) => p.type === type);
      if (i >= 0) return Promise.resolve(pending.splice(i, 1)[0] as never);
      return new Promise((resolve, reject) => {
        const waiter = {
          type,
          resolve: (msg: ServerMessage) => {
            clearTimeout(timer);
            resolve(msg as never);
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no ${type} message within ${timeoutMs} ms; got ${JSON.stringify(pending).slice(0, 500)}`));
        }, timeoutMs);
        waiters.push(waiter);
        void closed.then((c) => reject(new Error(`the connection closed (${c.code} ${c.reason}) while waiting for ${type}`)));
      });
    },
  };
}

/** Closes every socket a test opened and waits until each is closed. */
export async function closeRawWorkers(open: WebSocket[]): Promise<void> {
  await Promise.all(
    open.splice(0).map(
      (ws) =>
        new Promise<void>((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve();
          ws.once("close", () => resolve());
          if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
          else ws.close();
          setTimeout(() => {
            ws.terminate();
            resolve();
          }, 2_000).unref();
        }),
    ),
  );
}
