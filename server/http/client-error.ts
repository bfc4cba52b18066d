import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { ERROR_CODES, type ErrorCode } from "@svc/contract";
import { randomId } from "../crypto.js";
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
    const { status, type } = ERROR_CODES[code];
    const requestId = randomId("req_", 20);
    const body = JSON.stringify({ error: { type, code, message, requestId } });
    logger.info({ requestId, status, parserError: err.code }, "request refused by the HTTP parser");
    socket.on("error", () => {});
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\n` +
        "Content-Type: application/json; charset=utf-8\r\n" +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        `Request-Id: ${requestId}\r\n` +
        "Connection: close\r\n\r\n" +
        body,
    );
    // A peer that never reads the answer does not keep the socket.
    setTimeout(() => socket.destroy(), 5000).unref();
  };
}
