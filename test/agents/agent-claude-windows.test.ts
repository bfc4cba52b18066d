import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { JobEvent, UsageWindow } from "@svc/contract";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";
import { ClaudeCodeRuntime } from "../../worker/src/runtimes/claude-code.js";
import { recordingJobContext } from "../helpers/job-context.js";
import { startAnthropicStandIn, UNIFIED_RESETS_AT, type AnthropicStandIn } from "../helpers/anthropic-standin.js";

/**
 * The real Claude Code (2.1.197) on a claude.ai subscription login (a
 * credentials file in its HOME; the stand-in sees `Bearer sk-ant-oat...`, no API
 * key) against the Anthropic stand-in sending the `anthropic-ratelimit-unified-*`
 * headers: its `rate_limit_event`s become the worker's windows, and a 429 with the
 * 5-hour window rejected fails the job `usage_limit_reached` naming the reset.
 * Run unconfined, straight through the runtime.
 */
let api: AnthropicStandIn;
let root: string;
beforeAll(async () => {
  api = await startAnthropicStandIn();
  root = fs.mkdtempSync(path.join(os.tmpdir(), "svc-claude-windows-"));
  fs.mkdirSync(path.join(root, "home", ".claude"), { recursive: true });
  fs.mkdirSync(path.join(root, "work"));
  const login = { claudeAiOauth: { accessToken: "sk-ant-oat01-standin", refreshToken: "sk-ant-ort01-standin", expiresAt: Date.now() + 86_400_000, scopes: ["user:inference", "user:profile"], subscriptionType: "max" } };
  fs.writeFileSync(path.join(root, "home", ".claude", ".credentials.json"), JSON.stringify(login), { mode: 0o600 });
  fs.writeFileSync(path.join(root, "home", ".claude.json"), JSON.stringify({ hasCompletedOnboarding: true }));
});
afterAll(async () => {
  await api?.close();
  fs.rmSync(root, { recursive: true, force: true });
});

async function runClaude(prompt: string): Promise<{ events: JobEvent[]; windows: UsageWindow[][] }> {
  const env = { PATH: process.env.PATH!, HOME: path.join(root, "home"), ANTHROPIC_BASE_URL: api.url };
  const { ctx, events, windows } = recordingJobContext(env);
  await new ClaudeCodeRuntime({ name: "claude-code" } as never, CLAUDE_BIN, path.join(root, "work")).run({ kind: "agent_run", runtime: "claude-code", prompt }, ctx);
  return { events, windows };
}

const reset = new Date(UNIFIED_RESETS_AT * 1000).toISOString();

it("on a subscription login, the 5-hour window past its warning threshold reaches the worker as a warning with its use and reset", async () => {
  const { events, windows } = await runClaude("hello [[window:0.92]]");
  expect(events.at(-1)).toMatchObject({ type: "done" });
  expect(windows.flat()).toContainEqual({ window: "5h", status: "warning", usedPercent: 92, resetsAt: reset });
  // The login is what the stand-in saw: no API key.
  expect(JSON.stringify(api.requests.map((r) => r.headers.authorization))).toContain("Bearer sk-ant-oat01-standin");
}, 60_000);

it("a spent 5-hour window (429, rejected) fails the job usage_limit_reached, naming the reset", async () => {
  const { events, windows } = await runClaude("hello [[spent]]");
  expect(windows.flat()).toContainEqual({ window: "5h", status: "rejected", resetsAt: reset });
  expect(events.at(-1)).toMatchObject({ type: "failed", code: "usage_limit_reached" });
  expect((events.at(-1) as { message: string }).message).toContain(`Claude Code has used its subscription's 5-hour window; it resets at ${reset}`);
}, 60_000);
