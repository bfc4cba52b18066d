/**
 * A second consumer of openapi.json, with an independent generator: @hey-api/openapi-ts (its
 * fetch client and SDK functions, generated into ./generated/hey-api/ by
 * test/platform/openapi-client.test.ts). Type-checked under `--strict` on its own
 * (./tsconfig.hey-api.json), then run against a real server: a run with an app tool call and an
 * approval answered over HTTP, a chat completion, a streamed response, and the user's usage.
 * No casts; nothing here imports the contract.
 */
import { createClient } from "./generated/hey-api/client/index.js";
import { createChatCompletion, createResponse, createRun, getRun, listUsage, submitApproval, submitToolResult } from "./generated/hey-api/sdk.gen.js";
import type { RunEvent } from "./generated/hey-api/types.gen.js";

export interface HeyApiResult {
  kinds: string[];
  toolResults: string[];
  approvals: string[];
  output: string | null;
  runStatus: string;
  chat: string | null;
  responseEvents: string[];
  usageKinds: string[];
}

export async function heyApiSample(baseUrl: string, appKey: string, user: string): Promise<HeyApiResult> {
  const client = createClient({ baseUrl, auth: () => appKey });

  // A run on svc/echo whose script calls the app's `weather`, then `send_mail` (which needs an approval), then says what came back.
  const script = JSON.stringify([{ call: "weather", arguments: { city: "Paris" } }, { call: "send_mail", arguments: { to: "team@example.com" } }, { say: "Done: {{result}}." }]);
  const { stream } = await createRun({
    client,
    body: {
      user,
      model: "svc/echo",
      prompt: script,
      tools: [
        { name: "weather", description: "Today's weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } } },
        { name: "send_mail", needsApproval: true, parameters: { type: "object", properties: { to: { type: "string" } } } },
      ],
    },
    sseMaxRetryAttempts: 0,
  });
  const kinds: string[] = [];
  const toolResults: string[] = [];
  const approvals: string[] = [];
  let output: string | null = null;
  let runId = "";
  for await (const event of stream) {
    const e: RunEvent = event;
    kinds.push(e.kind);
    if (e.kind === "run_started") runId = e.runId;
    if (e.kind === "tool_call") {
      const answered = await submitToolResult({ client, path: { id: runId }, body: { callId: e.callId, result: e.name === "weather" ? "sunny" : "sent" } });
      if (answered.data) toolResults.push(`${e.name}:${answered.data.accepted}`);
    }
    if (e.kind === "approval_request") {
      const decided = await submitApproval({ client, path: { id: runId }, body: { approvalId: e.approvalId, decision: "allow" } });
      if (decided.data) approvals.push(decided.data.decision);
    }
    if (e.kind === "run_completed") output = e.output;
    // The stream ends with the run; a client that reconnects would start another.
    if (e.kind === "run_completed" || e.kind === "run_failed" || e.kind === "run_cancelled") break;
  }
  const run = await getRun({ client, path: { id: runId } });
  if (!run.data) throw new Error(`getRun: ${run.response?.status}`);

  const chat = await createChatCompletion({ client, body: { model: "svc/echo", user, messages: [{ role: "user", content: "ping" }] } });
  if (!chat.data) throw new Error(`createChatCompletion: ${chat.response?.status}`);
  const chatText = "choices" in chat.data && chat.data.object === "chat.completion" ? (chat.data.choices[0]?.message.content ?? null) : null;

  // A streamed response, its events read as text: each `event:` line names one.
  const streamed = await createResponse({ client, body: { model: "svc/echo", user, input: "Hello", stream: true }, parseAs: "text" });
  const text: unknown = streamed.data;
  const responseEvents = typeof text === "string" ? [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1] ?? "") : [];

  const usage = await listUsage({ client, query: { user, limit: 50 } });
  if (!usage.data) throw new Error(`listUsage: ${usage.response?.status}`);

  return { kinds, toolResults, approvals, output, runStatus: run.data.status, chat: chatText, responseEvents, usageKinds: usage.data.data.map((r) => r.kind) };
}
