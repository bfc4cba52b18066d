/**
 * The loop an app runs itself, shared by bench/runs.ts and bench/floor.ts: the
 * worker's OpenAI-compatible adapter called directly against the model stand-in,
 * the transcript kept here, the app's tools called here (app-loop.ts).
 */
import { performance } from "node:perf_hooks";
import { OpenAICompatibleRuntime } from "../worker/src/runtimes/openai-compatible.js";
import type { JobEvent } from "@svc/contract";
import { ROUND_TRIPS, RUN_TIMEOUT_MS, TOOLS, TOOL_SPECS, PROMPT, type Loop } from "./app-loop.js";

/** The model the stand-in serves (bench/model-standin.ts answers any name). */
export const MODEL = "llama3.2:3b";

export type Msg = { role: string; content?: string | null; tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[]; tool_call_id?: string };

/** The app's tools as the model is told of them. */
export const MODEL_TOOLS = TOOL_SPECS.map((t) => ({ type: "function" as const, function: { name: t.name, description: undefined, parameters: t.parameters } }));

/**
 * One model turn through the worker's adapter, each event handed to `onEvent` as it comes
 * (what a worker relays); a model turn uses only `emit` and `signal` of the job context.
 * The app's tools go with it unless `withTools` is false (a chat completion's turn).
 */
export function modelTurns(modelUrl: string) {
  const runtime = new OpenAICompatibleRuntime({ name: "ollama", kind: "model", costClass: "user_hardware", models: [MODEL] }, modelUrl);
  const unused = () => Promise.reject(new Error("not used by a model turn"));
  return async (messages: Msg[], onEvent: (e: JobEvent) => void, signal: AbortSignal, model = MODEL, withTools = true): Promise<void> => {
    const ctx = { emit: onEvent, signal, askPermission: async () => ({ allow: true }), withdrawPermission: () => {}, callTool: unused, launch: unused, commandOutput: "none" as const, allowedEnv: {} };
    await runtime.run({ kind: "model_turn", runtime: "ollama", model, messages: messages as never, ...(withTools ? { tools: MODEL_TOOLS } : {}) }, ctx);
  };
}

/** The loop an app would run itself: the worker's adapter against the model, tools here. */
export function baselineLoop(modelUrl: string): Loop {
  const run = modelTurns(modelUrl);

  /** One model turn; `at` is when its tool call (or, without one, its end) was in hand. */
  async function turn(messages: Msg[]) {
    let at = 0;
    let text = "";
    const calls: { id: string; name: string; arguments: string }[] = [];
    let failure: string | null = null;
    const onEvent = (e: JobEvent) => {
      if (e.type === "tool_call") {
        if (!at) at = performance.now();
        calls.push({ id: e.id, name: e.name, arguments: e.arguments });
      } else if (e.type === "text_delta") text += e.text;
      else if (e.type === "done") {
        if (!at) at = performance.now();
        text ||= e.output;
      } else if (e.type === "failed") failure = `${e.code}: ${e.message}`;
    };
    await run(messages, onEvent, AbortSignal.timeout(RUN_TIMEOUT_MS));
    if (failure) throw new Error(`baseline turn failed: ${failure}`);
    return { at, text, calls };
  }

  return async function loop(samples): Promise<void> {
    let messages: Msg[] = [{ role: "user", content: PROMPT }];
    let ready = 0;
    let toolCalls = 0;
    for (let i = 0; i < 20; i++) {
      const r = await turn(messages);
      if (ready) samples?.push(r.at - ready);
      if (r.calls.length === 0) {
        if (toolCalls !== ROUND_TRIPS) throw new Error(`baseline: ${toolCalls} tool calls, expected ${ROUND_TRIPS}`);
        return;
      }
      const results: Msg[] = r.calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: JSON.stringify(TOOLS[c.name](JSON.parse(c.arguments))) }));
      toolCalls += r.calls.length;
      ready = performance.now();
      messages = [...messages, { role: "assistant", content: r.text || null, tool_calls: r.calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }, ...results];
    }
    throw new Error("baseline: no final answer after 20 turns");
  };
}
