import readline from "node:readline";

/** How long a question at the terminal waits for the user before it counts as no. */
export const CONFIRM_TIMEOUT_MS = 60_000;

let queue: Promise<unknown> = Promise.resolve();

/**
 * Asks the user at this worker's terminal (y/N), one question at a time; no
 * answer within the timeout is no. Without a terminal there is nobody to ask:
 * null, and the caller refuses.
 */
export function confirmAtTerminal(question: string, io: { input: NodeJS.ReadableStream & { isTTY?: boolean }; output: NodeJS.WritableStream } = { input: process.stdin, output: process.stdout }, timeoutMs = CONFIRM_TIMEOUT_MS): Promise<boolean> | null {
  if (!io.input.isTTY) return null;
  const asked = queue.then(
    () =>
      new Promise<boolean>((resolve) => {
        const rl = readline.createInterface({ input: io.input, output: io.output });
        const timer = setTimeout(() => {
          io.output.write(`\n  (no answer in ${Math.round(timeoutMs / 1000)} s: no)\n`);
          rl.close();
          resolve(false);
        }, timeoutMs);
        rl.question(`${question} [y/N] `, (answer) => {
          clearTimeout(timer);
          rl.close();
          resolve(/^y(es)?$/i.test(answer.trim()));
        });
      }),
  );
  queue = asked.catch(() => {});
  return asked;
}
