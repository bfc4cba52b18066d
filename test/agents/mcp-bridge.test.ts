import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { startToolBridge, type ToolBridge } from "../../worker/src/mcp/bridge-host.js";

/**
 * The worker's tool bridge, driven by the official MCP client over stdio, as an
 * agent CLI drives it: the app's tools listed with their schemas, each call
 * answered by whatever the service relays, nothing else let in.
 */
describe("the MCP tool bridge", () => {
  const open: { bridge?: ToolBridge; client?: Client }[] = [];
  afterEach(async () => {
    for (const o of open.splice(0)) {
      await o.client?.close();
      await o.bridge?.close();
    }
  });

  async function connect(calls: { id: string; name: string; arguments: string }[], answer = (name: string) => ({ output: `result of ${name}`, isError: false })) {
    const bridge = await startToolBridge(
      [
        { name: "lookup_order", description: "Finds an order by id.", parameters: { type: "object", properties: { id: { type: "string" } }, required: ["id"] } },
        { name: "refund" },
      ],
      async (call) => (calls.push(call), answer(call.name)),
    );
    const client = new Client({ name: "test-cli", version: "1.0.0" });
    await client.connect(new StdioClientTransport({ command: bridge.server.command, args: bridge.server.args, env: { ...bridge.server.env, PATH: process.env.PATH ?? "" }, stderr: "pipe" }));
    open.push({ bridge, client });
    return { bridge, client };
  }

  it("lists the app's tools with their descriptions and schemas, and relays each call and its answer", async () => {
    const calls: { id: string; name: string; arguments: string }[] = [];
    const { bridge, client } = await connect(calls, (name) => (name === "refund" ? { output: "refunds are off", isError: true } : { output: '{"status":"shipped"}', isError: false }));
    expect(bridge.name).toBe("app");
    expect(bridge.toolNames).toEqual(["lookup_order", "refund"]);
    const { tools } = await client.listTools();
    expect(tools.map((t) => [t.name, t.description ?? null, t.inputSchema])).toEqual([
      ["lookup_order", "Finds an order by id.", { type: "object", properties: { id: { type: "string" } }, required: ["id"] }],
      ["refund", null, { type: "object" }],
    ]);

    const result = await client.callTool({ name: "lookup_order", arguments: { id: "o_42" } });
    expect(result).toMatchObject({ content: [{ type: "text", text: '{"status":"shipped"}' }], isError: false });
    expect(calls).toHaveLength(1);
    expect(calls[0].name).toBe("lookup_order");
    expect(JSON.parse(calls[0].arguments)).toEqual({ id: "o_42" });
    expect(calls[0].id).toMatch(/^mcp_[A-Za-z0-9_-]{12}$/);

    const failed = await client.callTool({ name: "refund", arguments: {} });
    expect(failed).toMatchObject({ content: [{ type: "text", text: "refunds are off" }], isError: true });
  });

  it("answers a tool the run did not offer with an error, without asking anyone", async () => {
    const calls: { id: string; name: string; arguments: string }[] = [];
    const { client } = await connect(calls);
    const result = await client.callTool({ name: "delete_everything", arguments: {} });
    expect(result).toMatchObject({ isError: true, content: [{ type: "text", text: "No tool named delete_everything is offered on this run." }] });
    expect(calls).toEqual([]);
  });

  it("lets in only who holds its token, and leaves nothing behind when closed", async () => {
    const calls: { id: string; name: string; arguments: string }[] = [];
    const bridge = await startToolBridge([{ name: "t" }], async (call) => (calls.push(call), { output: "", isError: false }));
    const socketPath = bridge.server.args.at(-1)!;
    const received = await new Promise<string>((resolve) => {
      const s = net.createConnection(socketPath, () => s.write('{"token":"guess"}\n{"id":1,"name":"t","arguments":"{}"}\n'));
      let got = "";
      s.on("data", (d) => (got += d));
      s.on("close", () => resolve(got));
    });
    expect(received).toBe("");
    expect(calls).toEqual([]);
    await bridge.close();
    expect(await new Promise((resolve) => net.createConnection(socketPath).on("error", (e: NodeJS.ErrnoException) => resolve(e.code)))).toBe("ENOENT");
  });
});
