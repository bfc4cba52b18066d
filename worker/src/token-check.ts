import WebSocket from "ws";
import type { Credentials } from "./store.js";

/** Opens the connection only to see whether the service takes the token, then closes it. */
export function checkToken(credentials: Credentials, timeoutMs = 10_000): Promise<"accepted" | "refused (the machine was removed: pair it again)" | `unreachable (${string})`> {
  return new Promise((resolve) => {
    const ws = new WebSocket(credentials.connectUrl, { headers: { authorization: `Bearer ${credentials.pairingToken}` }, handshakeTimeout: timeoutMs });
    ws.on("open", () => (ws.close(1000, "status check"), resolve("accepted")));
    ws.on("unexpected-response", (_req, res) => {
      resolve(res.statusCode === 401 ? "refused (the machine was removed: pair it again)" : `unreachable (the server answered ${res.statusCode})`);
      ws.terminate();
    });
    ws.on("error", (err) => resolve(`unreachable (${err.message})`));
  });
}
