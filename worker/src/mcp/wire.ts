/**
 * The line protocol between the tool bridge's host (in the worker) and its MCP
 * server (a child of the agent CLI), over a Unix socket in a private folder.
 * One JSON object per line:
 *
 *   server → host  {"token": "..."}                          first line: who it is
 *   host → server  {"tools": [{name, description, parameters}]}
 *   server → host  {"id": 1, "name": "lookup", "arguments": "{...}"}
 *   host → server  {"id": 1, "output": "...", "isError": false}
 */
export interface WireTool {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
}

/** The longest line either side takes (a tool's arguments or result included); a longer one drops the connection. */
export const BRIDGE_MAX_LINE_BYTES = 1024 * 1024;

/** The environment variable carrying the bridge's token to its MCP server (never on the command line, where `ps` shows it). */
export const BRIDGE_TOKEN_ENV = "SVC_TOOL_BRIDGE_TOKEN";

/** Splits a byte stream into lines of at most `BRIDGE_MAX_LINE_BYTES`; calls `tooLong` (once) when one passes it. */
export function lineReader(onLine: (line: string) => void, tooLong: () => void): (chunk: Buffer) => void {
  let pending = "";
  let broken = false;
  return (chunk) => {
    if (broken) return;
    pending += chunk.toString("utf8");
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (line.trim()) onLine(line);
    }
    if (Buffer.byteLength(pending) > BRIDGE_MAX_LINE_BYTES) {
      broken = true;
      tooLong();
    }
  };
}
