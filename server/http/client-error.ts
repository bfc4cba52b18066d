import { STATUS_CODES, type IncomingMessage, type RequestListener, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { ErrorCode } from "@svc/contract";
import { randomId } from "../crypto.js";
import { ApiError } from "../errors.js";
import type { Logger } from "../logger.js";

/** What Node's HTTP parser refused, in the envelope's terms. */
function codeFor(err: NodeJS.ErrnoException): { code: ErrorCode; message: string } {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return { code: "headers_too_large", message: "The request's headers (or its URL) are larger than the server accepts (16 KiB)." };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { code: "request_timeout", message: "The request did not arrive in time." };
    case "HPE_INVALID_METHOD":
      return { code: "invalid_request", message: "The request's method is not an HTTP method this server knows." };
    case "HPE_INVALID_CONTENT_LENGTH":
    case "HPE_UNEXPECTED_CONTENT_LENGTH":
      return { code: "invalid_request", message: "The request's Content-Length is malformed or conflicts with its Transfer-Encoding." };
    case "HPE_INVALID_CHUNK_SIZE":
    case "HPE_INVALID_TRANSFER_ENCODING":
      return { code: "invalid_request", message: "The request's chunked body is malformed." };
    default:
      return { code: "invalid_request", message: "The request is not valid HTTP/1.1." };
  }
}

/**
 * The server's `clientError` handler: what the HTTP parser refuses (a bad
 * Content-Length, broken chunking, an unknown method, oversized headers) is
 * answered in the error envelope when a response can still be written, then the
 * connection is closed; a reset connection is just closed. Without it Node
 * answers a bare `400 Bad Request` with no body.
 */
export function answerClientError(logger: Logger) {
  return (err: NodeJS.ErrnoException, socket: Duplex) => {
    // A response already under way on this connection (a pipelined request) cannot be followed by another one.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === "ECONNRESET" || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const { code, message } = codeFor(err);
    const refusal = new ApiError(code, message);
    const requestId = randomId("req_", 20);
    logger.info({ requestId, status: refusal.status, parserError: err.code }, "request refused by the HTTP parser");
    socket.on("error", () => {});
    answerOnSocket(socket, refusal, requestId);
    // A peer that never reads the answer does not keep the socket.
    setTimeout(() => socket.destroy(), 5000).unref();
  };
}

/**
 * One envelope answer written straight on a socket, where no HTTP response exists
 * (the parser refused the request, a `CONNECT`, a refused WebSocket upgrade), then
 * the connection closes. The request id is the one its caller logged the refusal with.
 */
export function answerOnSocket(socket: Duplex, err: ApiError, requestId: string): void {
  const body = JSON.stringify(err.toEnvelope(requestId));
  const head = [
    `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? "Error"}`,
    "Content-Type: application/json; charset=utf-8",
    `Content-Length: ${Buffer.byteLength(body)}`,
    `Request-Id: ${requestId}`,
    "Connection: close",
  ];
  if (err.status === 401) head.push('WWW-Authenticate: Bearer realm="svc"');
  for (const [name, value] of Object.entries(err.extra.headers ?? {})) head.push(`${name}: ${value}`);
  socket.end(`${head.join("\r\n")}\r\n\r\n${body}`);
}

/** One envelope answer written straight on a Node response (before Express), then the connection closes. */
function answer(res: ServerResponse, logger: Logger, code: ErrorCode, message: string): void {
  const refusal = new ApiError(code, message);
  const requestId = randomId("req_", 20);
  const body = JSON.stringify(refusal.toEnvelope(requestId));
  logger.info({ requestId, status: refusal.status, method: res.req?.method }, "request refused before routing");
  res.writeHead(refusal.status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body), "Request-Id": requestId, Connection: "close" });
  res.end(body);
}

/**
 * In front of Express, for what it would answer outside the envelope (its final
 * handler's HTML page) or what Node would answer with an empty body: a request
 * target that is not a path (`GET http://[::`), an HTTP/1.1 request without
 * `Host` (the server is created with `requireHostHeader: false` so that it
 * reaches here). Everything else goes on to `app`.
 */
export function edgeGuard(app: RequestListener, logger: Logger): RequestListener {
  return (req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? "";
    if (req.httpVersion === "1.1" && req.headers.host === undefined) return answer(res, logger, "invalid_request", "An HTTP/1.1 request must carry a Host header.");
    let target: URL | null = null;
    try {
      target = new URL(url, "http://localhost");
    } catch {
      target = null;
    }
    if (!target || !(url.startsWith("/") || /^https?:\/\//i.test(url))) return answer(res, logger, "invalid_request", "The request target must be a path (origin form, like /v1/runs).");
    app(req, res);
  };
}

/** `Expect` other than `100-continue`: 417 in the envelope (Node's own answer has no body). */
export function answerExpectation(logger: Logger) {
  return (_req: IncomingMessage, res: ServerResponse) => answer(res, logger, "expectation_failed", "The only expectation this server meets is Expect: 100-continue.");
}

/** `CONNECT`: this is no proxy. 405 in the envelope, then the connection closes (Node would drop it silently). */
export function answerConnect(logger: Logger) {
  return (_req: IncomingMessage, socket: Duplex) => {
    const refusal = new ApiError("method_not_allowed", "CONNECT is not allowed: this server is no proxy.");
    const requestId = randomId("req_", 20);
    logger.info({ requestId, status: refusal.status, method: "CONNECT" }, "request refused before routing");
    socket.on("error", () => {});
    answerOnSocket(socket, refusal, requestId);
  };
}
