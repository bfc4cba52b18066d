import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import readline from "node:readline";
import type { Launched } from "./runtime.js";

/**
 * A CLI that speaks newline-delimited JSON on stdout, started as the launcher
 * made it (in its working folder, sandboxed). Lines that are not JSON objects
 * are skipped (CLIs print the odd banner). Resolves with the exit code once
 * stdout is drained and the launch is cleaned up.
 */
export function runNdjson(
  launched: Launched,
  signal: AbortSignal,
  onLine: (line: Record<string, unknown>, child: ChildProcessWithoutNullStreams) => void,
): { child: ChildProcessWithoutNullStreams; exited: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn(launched.command, launched.args, { cwd: launched.cwd, stdio: ["pipe", "pipe", "pipe"], env: launched.env });
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
    const done = async () => {
      if (!(closedLines && exitedProcess)) return;
      signal.removeEventListener("abort", onAbort);
      try {
        await launched.cleanup?.();
      } catch {
        // best effort: a temporary folder left behind is not worth failing the job
      }
      resolve({ code, stderr });
    };
    lines.on("close", () => ((closedLines = true), void done()));
    child.on("error", (err) => {
      stderr += String(err.message);
      exitedProcess = true;
      closedLines = true;
      void done();
    });
    child.on("exit", (c) => ((code = c), (exitedProcess = true), void done()));
  });
  return { child, exited };
}
