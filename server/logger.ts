import { pino, type Logger } from "pino";

export type { Logger };

/**
 * Structured JSON logs. Credentials never reach a log line: request logs carry no
 * headers or bodies, and these paths are redacted should anything pass them in.
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: undefined,
      redact: {
        paths: [
          "authorization",
          "*.authorization",
          "headers.authorization",
          "*.headers.authorization",
          "secret",
          "*.secret",
          "token",
          "*.token",
          "appKey",
          "*.appKey",
          "password",
          "*.password",
          "cookie",
          "*.cookie",
          "headers.cookie",
          "*.headers.cookie",
          "csrfToken",
          "*.csrfToken",
        ],
        censor: "[redacted]",
      },
    },
    destination ?? process.stdout,
  );
}
