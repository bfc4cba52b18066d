import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { JobEvent, UsageWindow } from "@svc/contract";
import { CODEX_BIN } from "../../scripts/test-tools.mjs";
import { CodexRuntime } from "../../worker/src/runtimes/codex.js";
import { recordingJobContext } from "../helpers/job-context.js";
import { startResponsesStandIn, WINDOW_RESETS_AT, type ResponsesStandIn } from "../helpers/responses-standin.js";

/**
 * The real Codex (`@openai/codex` 0.169.0) against the Responses stand-in sending
 * Codex's own rate limit headers (`x-codex-primary-*`, `x-codex-secondary-*`):
 * its app-server's `account/rateLimits/updated` becomes the worker's windows, and
 * a 429 `usage_limit_reached` fails the job `usage_limit_reached` naming the reset.
 * Run unconfined (Codex's own workspace-write), straight through the runtime.
 */
let api: ResponsesStandIn;
let root: string;
beforeAll(async () => {
  api = await startResponsesStandIn();
  root = fs.mkdtempSync(path.join(os.tmpdir(), "svc-codex-windows-"));
  fs.mkdirSync(path.join(root, "home", ".codex"), { recursive: true });
  fs.mkdirSync(path.join(root, "work"));
  fs.writeFileSync(
    path.join(root, "home", ".codex", "config.toml"),
    `model = "standin-model"\nmodel_provider = "standin"\n[model_providers.standin]\nname = "standin"\nbase_url = "${api.url}/v1"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n`,
  );
});
afterAll(async () => {
  await api?.close();
  fs.rmSync(root, { recursive: true, force: true });
});

async function runCodex(prompt: string): Promise<{ events: JobEvent[]; windows: UsageWindow[][] }> {
  const env = { PATH: process.env.PATH!, HOME: path.join(root, "home"), CODEX_HOME: path.join(root, "home", ".codex"), STANDIN_API_KEY: "sk-standin" };
  const { ctx, events, windows } = recordingJobContext(env);
  await new CodexRuntime({ name: "codex" } as never, CODEX_BIN, path.join(root, "work")).run({ kind: "agent_run", runtime: "codex", prompt }, ctx);
  return { events, windows };
}

it("the stand-in's window headers reach the worker as Codex's windows", async () => {
  const { events, windows } = await runCodex("hello [window:93]");
  expect(events.at(-1)).toMatchObject({ type: "done" });
  const reset = new Date(WINDOW_RESETS_AT * 1000).toISOString();
  expect(windows.flat()).toContainEqual({ window: "5h", status: "warning", usedPercent: 93, resetsAt: reset });
  expect(windows.flat()).toContainEqual({ window: "7d", status: "allowed", usedPercent: 12, resetsAt: new Date((WINDOW_RESETS_AT + 86_400) * 1000).toISOString() });
}, 60_000);

it("a spent window (429 usage_limit_reached) fails the job usage_limit_reached, naming the reset", async () => {
  const { events, windows } = await runCodex("hello [spent]");
  expect(windows.flat()).toContainEqual({ window: "5h", status: "rejected", usedPercent: 100, resetsAt: new Date(WINDOW_RESETS_AT * 1000).toISOString() });
  expect(events.at(-1)).toMatchObject({ type: "failed", code: "usage_limit_reached" });
  expect((events.at(-1) as { message: string }).message).toContain(new Date(WINDOW_RESETS_AT * 1000).toISOString());
}, 60_000);
