import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { nodeOf, removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { installIntoAsync } from "../helpers/sdk-package.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

/**
 * docs/app/runs.md's three-turn chat ("Conversations"), as written: its ```js block saved as
 * `example.mjs` in an empty folder where the SDK is installed from the running service (as the
 * doc says), run with `node example.mjs` and only `SVC_BASE_URL` and `SVC_API_KEY` set, as the
 * quick start exports them. What it prints must be what the doc says it prints: each turn
 * answered, the steering message delivered, the follow-ups remembering the previous answer.
 * On each Node an app may have (20, 22, 24: real binaries from test/tools, as
 * platform/node-versions runs the SDK), one after the other, against one server.
 */

const execFileAsync = promisify(execFile);
const DOC = "docs/app/runs.md";

/** The "Conversations" section of the doc: from its heading to the next `## `. */
function conversationsSection(): string {
  const text = fs.readFileSync(path.join(ROOT, DOC), "utf8");
  const start = text.indexOf("\n## Conversations\n");
  expect(start, `${DOC} has a "## Conversations" section`).toBeGreaterThan(0);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The section's example (its one ```js block importing the SDK) and the ```text block after "It prints:". */
function docExample(): { code: string; prints: string } {
  const section = conversationsSection();
  const blocks = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).filter((b) => b.includes('from "@svc/sdk"'));
  expect(blocks, "one ```js block importing @svc/sdk").toHaveLength(1);
  const prints = /It prints:\n\n```text\n([\s\S]*?)```/.exec(section)?.[1];
  expect(prints, 'an "It prints:" ```text block').toBeTruthy();
  return { code: blocks[0], prints: prints! };
}

describe("docs/app/runs.md: the three-turn chat from the SDK", () => {
  let server: TestServer;
  let dir: string;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    dir = tempDir("svc-conversations-doc-");
    // As the doc says: `npm install <service>/sdk/svc-sdk.tgz` in an empty folder (the service builds it on the first download).
    await installIntoAsync(dir, `${server.url}/sdk/svc-sdk.tgz`);
  }, 240_000);
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const node = (major: number, ctx: TestContext): string => nodeOf(major, ctx, "the doc's example");

  it.for([20, 22, 24])("runs as written with `node example.mjs` on Node %i, and prints what the doc says: each turn answered, the steering message delivered, the follow-ups remembering", { timeout: 90_000 }, async (major, ctx) => {
    const bin = node(major, ctx);
    const { code, prints } = docExample();
    fs.writeFileSync(path.join(dir, "example.mjs"), code);
    // What a user's shell has: the two variables the quick start exports, nothing of this test run.
    const env = { PATH: `${path.dirname(bin)}${path.delimiter}${process.env.PATH}`, HOME: dir, SVC_BASE_URL: `${server.url}/v1`, SVC_API_KEY: server.dev.appKey };
    const { stdout, stderr } = await execFileAsync(bin, ["example.mjs"], { cwd: dir, env, timeout: 60_000 }).catch((err) => {
      throw new Error(`node example.mjs failed:\n${err.stdout}\n${err.stderr}`);
    });
    expect(stderr).toBe("");
    const lines = stdout.trimEnd().split("\n");
    const turn = (n: number) => lines.find((l) => l.startsWith(`turn ${n}: `))?.slice(`turn ${n}: `.length) ?? "";

    // The steering message: sent during turn 1's wait, delivered into it, and answered by it.
    expect(lines).toContain("(steering message sent, delivery: next_turn)");
    expect(lines).toContain("(the agent got: Skip the slow tests, please.)");
    expect(turn(1)).toBe("Tests: 41 passed, 1 failed. Noted: Skip the slow tests, please.");
    // Each follow-up answers, and shows the answer before it.
    expect(turn(2)).toBe(`Fixed the failing test. Earlier I said: ${turn(1)}`);
    expect(turn(3)).toBe(`Committed. My last answer was: ${turn(2)}`);
    expect(lines).toContain("turn 3 continues turn 2: true");
    // And that is exactly what the doc shows.
    expect(stdout).toBe(prints);
  });
});
