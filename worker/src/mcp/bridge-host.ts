import crypto from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type { CallTool } from "../runtimes/runtime.js";
import { helperCommand, helperReadable } from "../layout.js";
import { BRIDGE_TOKEN_ENV, lineReader, type WireTool } from "./wire.js";

/** What an agent runtime needs to offer the app's tools to its CLI. */
export interface ToolBridge {
  /** The MCP server's name: Claude Code names its tools `mcp__app__<tool>`. */
  name: string;
  /** A stdio MCP server entry for the CLI's configuration. */
  server: { command: string; args: string[]; env: Record<string, string> };
  /** The app tools offered. */
  toolNames: string[];
  /** Paths the sandbox must let the CLI read so it can start the bridge: Node, the bridge's code and its packages. */
  readable: string[];
  /** Paths it must let it write: the socket's folder. */
  writable: string[];
  close(): Promise<void>;
}

/**
 * How long a CLI should wait for one of the app's tools (Claude Code's `MCP_TOOL_TIMEOUT`,
 * Codex's `tool_timeout_sec`): the longest tool-result deadline a run may set (an hour).
 * The service keeps the run's own deadline and fails the run when it passes.
 */
export const BRIDGE_TOOL_TIMEOUT_SEC = 3600;

/** The MCP server name the app's tools are offered under. */
export const BRIDGE_SERVER_NAME = "app";

/**
 * Offers the app's tools to an agent CLI for one job: a Unix socket in a private
 * folder (0700, a random token on top), and the command line of an MCP server
 * (`bridge-server`) the CLI starts and that asks here for the tools and each
 * call's result. Each call goes to `callTool` (the service, then the app) under
 * an id of the bridge's own; a tool the job did not offer is answered with an
 * error without asking anyone.
 */
export async function startToolBridge(tools: WireTool[], callTool: CallTool): Promise<ToolBridge> {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "svc-bridge-"));
  fs.chmodSync(folder, 0o700);
  const socketPath = path.join(folder, "tools.sock");
  const token = crypto.randomBytes(24).toString("base64url");
  const offered = new Map(tools.map((t) => [t.name, t]));
  const connections = new Set<net.Socket>();

  const server = net.createServer((socket) => {
    connections.add(socket);
    socket.on("close", () => connections.delete(socket));
    socket.on("error", () => socket.destroy());
    let trusted = false;
    const reply = (message: unknown) => socket.writable && socket.write(`${JSON.stringify(message)}\n`);
    socket.on(
      "data",
      lineReader(
        (line) => {
          let message: { token?: unknown; id?: unknown; name?: unknown; arguments?: unknown };
          try {
            message = JSON.parse(line);
          } catch {
            return void socket.destroy();
          }
          if (!trusted) {
            const given = Buffer.from(String(message.token ?? ""));
            const expected = Buffer.from(token);
            if (given.length !== expected.length || !crypto.timingSafeEqual(given, expected)) return void socket.destroy();
            trusted = true;
            return void reply({ tools });
          }
          if (typeof message.id !== "number" || typeof message.name !== "string") return void socket.destroy();
          const { id, name } = message;
          if (!offered.has(name)) return void reply({ id, output: `No tool named ${name} is offered on this run.`, isError: true });
          const args = typeof message.arguments === "string" ? message.arguments : "{}";
          void callTool({ id: `mcp_${crypto.randomBytes(9).toString("base64url")}`, name, arguments: args }).then(
            (answer) => reply({ id, ...answer }),
            (err: Error) => reply({ id, output: `The tool call failed: ${err.message}`, isError: true }),
          );
        },
        () => socket.destroy(),
      ),
    );
  });
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(socketPath, () => resolve()));
  fs.chmodSync(socketPath, 0o600);

  // The sources through tsx, the package's compiled script, or the single file itself (layout.ts).
  const bridge = helperCommand("mcp-bridge");

  return {
    name: BRIDGE_SERVER_NAME,
    server: { command: process.execPath, args: [...bridge.args, socketPath], env: { [BRIDGE_TOKEN_ENV]: token } },
    toolNames: tools.map((t) => t.name),
    readable: [...new Set([path.dirname(path.dirname(process.execPath)), ...helperReadable()])],
    writable: [folder],
    close: async () => {
      for (const socket of connections) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      fs.rmSync(folder, { recursive: true, force: true });
    },
  };
}
