/**
 * The script of a run on `svc/echo`, the service's own model: what an app's
 * integration test writes as the run's prompt to make the "model" call its
 * tools, ask approvals, say things or fail, with no paired machine.
 *
 * A prompt is a script when, trimmed, it starts with `[` or `{`: a JSON array of
 * steps, or `{"script": [steps]}`. Any other prompt is echoed back. Steps:
 * `{"say": text}` (`{{result}}` in it stands for the results of the tool calls
 * of the previous turn), `{"call": tool, "arguments"?: any}` (ends the turn),
 * `{"fail": message}`, `{"wait": ms}`.
 */

/** The model the service answers itself: chat completions echo the last user message; runs echo the prompt or follow its script. */
export const ECHO_MODEL = "svc/echo";

/** The longest `wait` step: a model turn's default deadline. */
export const MAX_WAIT_MS = 10 * 60 * 1000;

export type ScriptStep = { say: string } | { call: string; arguments: unknown } | { fail: string } | { wait: number };

/** Why a prompt that looks like a script is not one (answered `400 invalid_request`, `param: prompt`). */
export class ScriptError extends Error {}

const FORMAT = 'a script is a JSON array of steps (or {"script": [...]}), each one of {"say": "text"}, {"call": "<tool>", "arguments": {...}}, {"fail": "message"}, {"wait": <ms>}';

/**
 * The steps of a prompt's script, or null when the prompt is not a script (it is
 * echoed). `tools` are the run's tools: a step calling any other is refused here,
 * at the run's start, rather than found out mid-run.
 */
export function parseScript(prompt: string, tools: readonly string[]): ScriptStep[] | null {
  const text = prompt.trim();
  if (!text.startsWith("[") && !text.startsWith("{")) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ScriptError(`The prompt starts like a svc/echo script but is not JSON (${(err as Error).message}); ${FORMAT}.`);
  }
  const steps = Array.isArray(value) ? value : isObject(value) && Object.keys(value).length === 1 && Array.isArray(value.script) ? value.script : null;
  if (!steps) throw new ScriptError(`The prompt is JSON but not a svc/echo script: ${FORMAT}.`);
  return steps.map((step, i) => parseStep(step, i + 1, tools));
}

function parseStep(step: unknown, n: number, tools: readonly string[]): ScriptStep {
  const where = `Step ${n} of the svc/echo script`;
  if (!isObject(step)) throw new ScriptError(`${where} is not an object; ${FORMAT}.`);
  const keys = Object.keys(step);
  if ("say" in step && keys.length === 1) {
    if (typeof step.say !== "string") throw new ScriptError(`${where}: "say" must be a string.`);
    return { say: step.say };
  }
  if ("call" in step && keys.every((k) => k === "call" || k === "arguments")) {
    if (typeof step.call !== "string" || !step.call) throw new ScriptError(`${where}: "call" must name a tool.`);
    if (!tools.includes(step.call)) {
      throw new ScriptError(`${where} calls the tool "${step.call}", which the run does not offer (its tools: ${tools.length ? tools.join(", ") : "none"}).`);
    }
    return { call: step.call, arguments: step.arguments ?? {} };
  }
  if ("fail" in step && keys.length === 1) {
    if (typeof step.fail !== "string") throw new ScriptError(`${where}: "fail" must be a string (the error message).`);
    return { fail: step.fail };
  }
  if ("wait" in step && keys.length === 1) {
    if (typeof step.wait !== "number" || !Number.isInteger(step.wait) || step.wait < 0 || step.wait > MAX_WAIT_MS) {
      throw new ScriptError(`${where}: "wait" must be a whole number of milliseconds from 0 to ${MAX_WAIT_MS}.`);
    }
    return { wait: step.wait };
  }
  throw new ScriptError(`${where} has the keys ${keys.map((k) => JSON.stringify(k)).join(", ") || "(none)"}; ${FORMAT}.`);
}

/**
 * The steps turn `index` (0-based) runs: the script cut after each `call`, so
 * each turn ends with one tool call, and the turn after the last call runs what
 * follows it (possibly nothing).
 */
export function stepsOfTurn(steps: ScriptStep[], index: number): ScriptStep[] {
  const turns: ScriptStep[][] = [[]];
  for (const step of steps) {
    turns.at(-1)!.push(step);
    if ("call" in step) turns.push([]);
  }
  return turns[index] ?? [];
}

/** Tokens as `svc/echo` counts them, on chat completions and runs alike: words. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
