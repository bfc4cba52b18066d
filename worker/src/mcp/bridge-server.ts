/**
 * The app's tools as an MCP server over stdio, started by the agent CLI itself
 * (its MCP configuration names this file). It knows nothing of the service: it
 * asks the worker's bridge host, over the Unix socket given as its argument,
 * for the tools and for each call's result.
 */
import net from "node:net";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { BRIDGE_TOKEN_ENV, lineReader, type WireTool } from "./wire.js";

const socketPath = process.argv[2];
const token = process.env[BRIDGE_TOKEN_ENV];
if (!socketPath || !token) {
  process.stderr.write(`usage: bridge-server <socket> (with ${BRIDGE_TOKEN_ENV} set)\n`);
  process.exit(2);
}

const socket = net.createConnection(socketPath);
const waiting = new Map<number, (answer: { output: string; isError: boolean }) => void>();
let nextId = 1;
let resolveTools: (tools: WireTool[]) => void;
const tools = new Promise<WireTool[]>((resolve) => (resolveTools = resolve));

socket.on(
  "data",
  lineReader(
    (line) => {
      const message = JSON.parse(line) as { tools?: WireTool[]; id?: number; output?: string; isError?: boolean };
      if (message.tools) return resolveTools(message.tools);
      if (typeof message.id === "number") waiting.get(message.id)?.({ output: String(message.output ?? ""), isError: message.isError === true });
      waiting.delete(message.id as number);
    },
    () => socket.destroy(),
  ),
);
// Without the host there is nothing to answer with: the CLI sees the server go away.
socket.on("close", () => process.exit(0));
socket.on("error", (err) => {
  process.stderr.write(`the tool bridge is unreachable: ${err.message}\n`);
  process.exit(1);
});
socket.write(`${JSON.stringify({ token })}\n`);

const server = new Server({ name: "app", version: "1.0.0" }, { capabilities: { tools: {} } });

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: (await tools).map((t) => ({
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    inputSchema: { type: "object" as const, ...(t.parameters ?? {}) },
  })),
}));

server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const id = nextId++;
  const answer = await new Promise<{ output: string; isError: boolean }>((resolve) => {
    waiting.set(id, resolve);
    socket.write(`${JSON.stringify({ id, name: request.params.name, arguments: JSON.stringify(request.params.arguments ?? {}) })}\n`);
  });
  return { content: [{ type: "text" as const, text: answer.output }], isError: answer.isError };
});

await server.connect(new StdioServerTransport());
