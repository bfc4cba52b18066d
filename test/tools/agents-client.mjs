// The OpenAI Agents SDK (@openai/agents, from test/tools: it needs zod 4, the service is held on
// zod 3) as an app uses it against the service's chat completions and its Responses API, run by
// test/chat/chat-agents-sdk and test/responses/responses-clients in a child process:
// `node test/tools/agents-client.mjs '<json>'`, one JSON line out.
//
// The argument: { baseURL, apiKey, cases: [{ name, user, model, input, stream?, via?, userField? }] }
// - via "model" (default): an `OpenAIChatCompletionsModel` over an `OpenAI` client of our own;
//   via "defaults": `setDefaultOpenAIClient` + `setOpenAIAPI("chat_completions")`, the model by name;
//   via "responses": an `OpenAIResponsesModel` over the same client (the Agents SDK's own default API).
// - userField: how the end user is sent, through `modelSettings.providerData` (the Agents SDK has no
//   setting of its own for it): "safety_identifier" (default) or "user"; "none": not at all.
// Each case runs one agent with one function tool, `weather`, executed by the Agents SDK itself.
// Out: { cases: { [name]: { finalOutput, calls, items, usage, sent, statuses, deltas?, events? } | { error, calls, sent, statuses } } }
import { Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, run, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";

// Nothing leaves for OpenAI's trace exporter.
setTracingDisabled(true);

const { baseURL, apiKey, cases } = JSON.parse(process.argv[2]);

/** Every request the OpenAI client sends (method, path, body) and every status it got back. */
const sent = [];
const statuses = [];
// The client's own defaults otherwise (its retries included), as an app has them.
const client = new OpenAI({
  baseURL,
  apiKey,
  fetch: async (url, init) => {
    const body = typeof init?.body === "string" ? JSON.parse(init.body) : null;
    sent.push({ method: init?.method ?? "GET", path: new URL(String(url)).pathname, body });
    const res = await fetch(url, init);
    statuses.push({ status: res.status, runId: res.headers.get("service-run-id") });
    return res;
  },
});
setDefaultOpenAIClient(client);
setOpenAIAPI("chat_completions");

async function runCase(c, calls) {
  const weather = tool({
    name: "weather",
    description: "The weather in a city",
    parameters: z.object({ city: z.string() }),
    execute: async (input, _context, details) => {
      calls.push({ input, callId: details?.toolCall?.callId ?? null });
      return `sunny in ${input.city}`;
    },
  });
  const agent = new Agent({
    name: "Weather agent",
    instructions: "Answer with the weather tool.",
    model: c.via === "defaults" ? c.model : c.via === "responses" ? new OpenAIResponsesModel(client, c.model) : new OpenAIChatCompletionsModel(client, c.model),
    tools: [weather],
    modelSettings: c.userField === "none" ? {} : { providerData: { [c.userField ?? "safety_identifier"]: c.user } },
  });
  const out = { calls };
  let result;
  if (c.stream) {
    const streamed = await run(agent, c.input, { stream: true });
    const deltas = [];
    const events = [];
    for await (const event of streamed) {
      if (event.type === "raw_model_stream_event" && event.data.type === "output_text_delta") deltas.push(event.data.delta);
      if (event.type === "run_item_stream_event") events.push(event.name);
    }
    await streamed.completed;
    if (streamed.error) throw streamed.error;
    Object.assign(out, { deltas, events });
    result = streamed;
  } else {
    result = await run(agent, c.input);
  }
  const usage = result.state.usage;
  return {
    ...out,
    finalOutput: result.finalOutput,
    items: result.newItems.map((i) => i.type),
    usage: { requests: usage.requests, inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, totalTokens: usage.totalTokens },
  };
}

const results = {};
for (const c of cases) {
  const calls = [];
  const first = { sent: sent.length, statuses: statuses.length };
  const seen = () => ({ sent: sent.slice(first.sent), statuses: statuses.slice(first.statuses) });
  try {
    results[c.name] = { ...(await runCase(c, calls)), ...seen() };
  } catch (err) {
    // What the app's code would catch: the error's class and the API error's fields, as the openai client gives them.
    const error = { name: err?.constructor?.name ?? null, message: String(err?.message ?? err), status: err?.status ?? null, code: err?.code ?? null, param: err?.param ?? null, type: err?.type ?? null };
    results[c.name] = { error, calls, ...seen() };
  }
}
process.stdout.write(`${JSON.stringify({ cases: results })}\n`);
