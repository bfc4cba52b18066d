import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import readline from "node:readline";

/**
 * A CLI that speaks newline-delimited JSON on stdout, started in `cwd` and only
 * there. Lines that are not JSON objects are skipped (CLIs print the odd banner).
 * Resolves with the exit code once stdout is drained.
 */
export function runNdjson(
  command: string,
  args: string[],
  cwd: string,
  signal: AbortSignal,
  onLine: (line: Record<string, unknown>, child: ChildProcessWithoutNullStreams) => void,
): { child: ChildProcessWithoutNullStreams; exited: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn(command, args, { cwd, stdio: ["pipe", "pipe", "pipe"], env: process.env });
  let stderr = "";
  child.stderr.on("data", (c) => (stderr = (stderr + c).slice(-4000)));
  child.stdin.on("error", () => {});
  const onAbort = () => child.kill("SIGTERM");
  signal.addEventListener("abort", onAbort, { once: true });
  const lines = readline.createInterface({ input: child.stdout });
  lines.on("line", (text) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return;
    }
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) onLine(parsed as Record<string, unknown>, child);
  });
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) => {
    let code: number | null = null;
    let closedLines = false;
    let exitedProcess = false;
    const done = () => closedLines && exitedProcess && (signal.removeEventListener("abort", onAbort), resolve({ code, stderr }));
    lines.on("close", () => ((closedLines = true), done()));
    child.on("error", (err) => {
      stderr += String(err.message);
      exitedProcess = true;
      closedLines = true;
      done();
    });
    child.on("exit", (c) => ((code = c), (exitedProcess = true), done()));
  });
  return { child, exited };
}
