/** How much of a command's output the app sees: the user's `commandOutput` policy. */
export type CommandOutputMode = "none" | "summary" | "full";

/**
 * The activity event for a command an agent CLI ran, shaped by the user's policy:
 * `none` says only that a command ran and how it ended; `summary` (default) adds
 * the command and the size of its output; `full` adds the output itself.
 */
export function commandActivity(mode: CommandOutputMode, cmd: { command: string; output?: string; exitCode?: number | null }): { summary: string; detail?: unknown } {
  const exit = cmd.exitCode === undefined || cmd.exitCode === null ? "" : ` (exit ${cmd.exitCode})`;
  const output = cmd.output ?? "";
  const lines = output ? output.replace(/\n$/, "").split("\n").length : 0;
  switch (mode) {
    case "none":
      return { summary: `ran a command${exit}` };
    case "summary":
      return { summary: `ran ${cmd.command}${exit}`, detail: { command: cmd.command, exitCode: cmd.exitCode ?? null, outputLines: lines, outputBytes: Buffer.byteLength(output) } };
    case "full":
      return { summary: `ran ${cmd.command}${exit}`, detail: { command: cmd.command, exitCode: cmd.exitCode ?? null, output } };
  }
}
