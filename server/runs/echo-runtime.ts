import type { ChatMessage, Job, JobEvent } from "@svc/contract";
import { randomId } from "../crypto.js";
import { jobFailed } from "../errors.js";
import type { JobHandle } from "../workers/hub.js";
import { countWords, parseScript, ScriptError, stepsOfTurn, type ScriptStep } from "./echo-script.js";

/**
 * The service's own runtime for runs on `svc/echo`: it takes a model turn the
 * way a worker does (the same `model_turn` job, the same job events), so a
 * scripted run goes through the run engine's model loop unchanged: its events,
 * tool calls, approvals, deadlines, cancel and ledger rows are those of any run.
 *
 * Which steps a turn runs follows from the conversation it is given (one turn
 * per tool call so far), so a run taken over by another instance goes on where
 * it stood.
 */
export class EchoRuntime {
  dispatch(job: Job, onEvent: (event: JobEvent, frameBytes: number) => void): JobHandle {
    const jobId = randomId("job_", 20);
    let cancelled = false;
    let timer: NodeJS.Timeout | null = null;
    let resume: (() => void) | null = null;
    const send = (e: JobEvent) => {
      if (!cancelled) onEvent(e, Buffer.byteLength(JSON.stringify(e)));
    };
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        resume = resolve;
        timer = setTimeout(resolve, ms);
      });
    void (async () => {
      // Never inside `dispatch`: the caller sets its watch up once the job is sent.
      await sleep(0);
      if (job.kind !== "model_turn") return send(jobFailed("runtime_error", "svc/echo takes model turns only."));
      await this.turn(job.messages, (job.tools ?? []).map((t) => t.function.name), send, sleep, () => cancelled);
    })().catch((err: unknown) => send(jobFailed("runtime_error", `svc/echo could not run the turn: ${(err as Error).message}`)));
    return {
      jobId,
      // Runs in this process: it has no link to lose.
      resumable: false,
      ack() {},
      cancel() {
        cancelled = true;
        if (timer) clearTimeout(timer);
        resume?.();
      },
      answerPermission() {},
      answerTool() {},
      // A model turn: a message the user adds goes in before the next turn, never into this one.
      steerable: false,
      sendMessage() {},
    };
  }

  private async turn(messages: ChatMessage[], tools: string[], send: (e: JobEvent) => void, sleep: (ms: number) => Promise<void>, cancelled: () => boolean): Promise<void> {
    const userAt = messages.map((m) => m.role).lastIndexOf("user");
    const prompt = userAt >= 0 ? textOf(messages[userAt]) : "";
    // The script is the latest user message that is one (messages the user added while it ran come after it; a
    // follow-up's prompt is the latest); a conversation without one echoes its latest user message.
    let steps: ScriptStep[] | null = null;
    let scriptAt = -1;
    for (let i = userAt; i >= 0 && steps === null; i--) {
      if (messages[i].role !== "user") continue;
      try {
        steps = parseScript(textOf(messages[i]), tools);
        if (steps) scriptAt = i;
      } catch (err) {
        // Checked at the run's start already; only a prompt changed since could get here.
        if (!(err instanceof ScriptError)) throw err;
        if (i === userAt) return send(jobFailed("invalid_script", err.message));
      }
    }
    const inputTokens = countWords(messages.map((m) => [textOf(m), ...(m.role === "assistant" ? (m.tool_calls ?? []) : []).map((c) => c.function.arguments)].join(" ")).join(" "));
    // The results of the previous turn's calls: what came after the last assistant message.
    const lastAssistant = messages.map((m) => m.role).lastIndexOf("assistant");
    const results = lastAssistant < 0 ? [] : messages.slice(lastAssistant + 1).filter((m) => m.role === "tool").map(textOf);
    let text = "";
    const say = (piece: string) => {
      text += piece;
      for (const word of piece.match(/\S+\s*|\s+/g) ?? []) send({ type: "text_delta", text: word });
    };
    const done = (finishReason: string, extraOutput = 0) =>
      send({ type: "done", finishReason, output: text, usage: { inputTokens, outputTokens: countWords(text) + extraOutput } });

    if (steps === null) {
      say(prompt);
      return done("stop");
    }
    const since = messages.slice(scriptAt + 1);
    const turnIndex = since.filter((m) => m.role === "assistant").length;
    // `{{previous}}`: the answer before the script's prompt (a follow-up's previous run); `{{messages}}`: what the user added since.
    const previous = messages.slice(0, scriptAt).filter((m) => m.role === "assistant").map(textOf).filter(Boolean).at(-1) ?? "";
    const added = since.filter((m) => m.role === "user").map(textOf);
    const mine = stepsOfTurn(steps, turnIndex);
    let said = false;
    for (const step of mine) {
      if (cancelled()) return;
      if ("say" in step) {
        say(step.say.replaceAll("{{result}}", results.join("\n")).replaceAll("{{previous}}", previous).replaceAll("{{messages}}", added.join("\n")));
        said = true;
      } else if ("wait" in step) {
        await sleep(step.wait);
      } else if ("fail" in step) {
        return send(jobFailed("script_failed", step.fail));
      } else {
        const args = JSON.stringify(step.arguments);
        send({ type: "tool_call", id: randomId("call_", 20), name: step.call, arguments: args });
        return done("tool_calls", countWords(args));
      }
    }
    if (cancelled()) return;
    // A last turn that says nothing answers with the tool results it was given, or else with what the user added since the last answer.
    const fresh = messages.slice(Math.max(lastAssistant, scriptAt) + 1).filter((m) => m.role === "user").map(textOf);
    if (!said && results.length) say(results.join("\n"));
    else if (!said && fresh.length) say(fresh.join("\n"));
    done("stop");
  }
}

/** A message's text. A run's transcript holds text only (content parts come with chat completions, whose `svc/echo` is answered in the chat service). */
function textOf(m: ChatMessage): string {
  return typeof m.content === "string" ? m.content : "";
}
