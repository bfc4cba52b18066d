import path from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, Page } from "playwright-core";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, startTestServerOn, type TestServer } from "../helpers/server.js";
import { axeViolations, contextAt, fitsWidth, overflowing, SHOTS, watch } from "../helpers/page-checks.js";
import { signInOwner, type SignedInOwner } from "../helpers/owner.js";
import { runCalls } from "../helpers/run-calls.js";
import { pollUntil } from "../helpers/process.js";

/**
 * A run's conversation in the dashboard's run inspector (issue 53): the run a follow-up continues
 * (`previousRunId`) and the runs that continued it (`continuedBy`, same app and environment only, oldest
 * first), and a message the user sent a run while it worked (`user_message`) in its timeline.
 *
 * A follow-up is started with `POST /v1/runs` and `previousRunId`. While the service does not take that
 * yet (being built alongside), the run is started without it and linked as the service links one
 * (`runs.previous_run_id`); likewise a steering message the service did not record is stored as it
 * stores one (`run_user_messages`, and its `user_message` event in `run_events`). Each says which.
 */

type Calls = ReturnType<typeof runCalls>;
type Detail = { previousRunId: string | null; continuedBy: { id: string; status: string; createdAt: string }[]; run: { id: string; status: string }; events: { seq: number; kind: string; data: Record<string, unknown> }[] };

/** Starts a follow-up of `previousRunId` (its `previousRunId`), or, refused, the same run without it (linked by `linkOf` once it ends). */
async function startFollowUp(calls: Calls, body: Record<string, unknown>, previousRunId: string): Promise<string> {
  let started = await calls.startRun({ ...body, previousRunId });
  if (started.status !== 200) {
    console.info(`POST /v1/runs with previousRunId answered ${started.status} ${JSON.stringify(started.error)}: the follow-up is linked in the database instead`);
    started = await calls.startRun(body);
  }
  expect(started.status, JSON.stringify(started.error)).toBe(200);
  return started.runId!;
}

/** The ended follow-up `runId` linked to `previousRunId`: by the service, or here, as the service stores it. */
async function linkOf(server: TestServer, runId: string, previousRunId: string): Promise<"api" | "seeded"> {
  const [row] = await server.db.query<{ previous_run_id: string | null }>(`SELECT previous_run_id FROM runs WHERE id = $1`, [runId]);
  if (row.previous_run_id !== null) {
    expect(row.previous_run_id).toBe(previousRunId);
    return "api";
  }
  await server.db.query(`UPDATE runs SET previous_run_id = $1 WHERE id = $2`, [previousRunId, runId]);
  return "seeded";
}

/**
 * Stores a steering message of an ended run as the service does: its `run_user_messages` row and its `user_message`
 * event right after event `afterSeq` (the later events one further on, the run's `last_seq` covering them).
 */
async function seedUserMessage(server: TestServer, runId: string, afterSeq: number, content: string, delivery: "now" | "next_turn"): Promise<string> {
  const { db } = server;
  const [run] = await db.query<{ app_id: string; environment: string; at: Date }>(
    `SELECT r.app_id, r.environment::text AS environment, e.created_at AS at FROM runs r JOIN run_events e ON e.run_id = r.id AND e.seq = $2 WHERE r.id = $1`,
    [runId, afterSeq],
  );
  const messageId = `msg_${randomBytes(10).toString("hex")}`;
  // Two steps, so that no two rows ever share a (run_id, seq) key on the way.
  await db.query(`UPDATE run_events SET seq = -seq - 1 WHERE run_id = $1 AND seq > $2`, [runId, afterSeq]);
  await db.query(`UPDATE run_events SET seq = -seq WHERE run_id = $1 AND seq < 0`, [runId]);
  await db.query(`INSERT INTO run_events (run_id, app_id, environment, seq, kind, data, created_at) VALUES ($1, $2, $3::"Environment", $4, 'user_message', $5::jsonb, $6)`, [
    runId,
    run.app_id,
    run.environment,
    afterSeq + 1,
    JSON.stringify({ kind: "user_message", messageId, content, delivery }),
    run.at,
  ]);
  await db.query(`UPDATE runs SET last_seq = last_seq + 1 WHERE id = $1`, [runId]);
  await db.query(
    `INSERT INTO run_user_messages (run_id, app_id, environment, message_id, content, created_at, delivered_at, delivered_seq) VALUES ($1, $2, $3::"Environment", $4, $5, $6, $6, $7)`,
    [runId, run.app_id, run.environment, messageId, content, run.at, afterSeq + 1],
  );
  return messageId;
}

/** A run of another tenant (its own app key) on `svc/echo`, ended. */
async function echoRunWith(server: TestServer, appKey: string, user: string): Promise<string> {
  const calls = runCalls({ fetch: server.fetch, dev: { appKey } });
  const started = await calls.startRun({ user, model: "svc/echo", prompt: "Hello" });
  expect(started.status, JSON.stringify(started.error)).toBe(200);
  await calls.ended(started.runId!);
  return started.runId!;
}

onEachDatabase("the run inspector's conversation on $db.name", (db) => {
  let server: TestServer;
  let owner: SignedInOwner;
  let calls: Calls;
  beforeAll(async () => {
    server = await startTestServerOn(db);
    owner = await signInOwner(server);
    calls = runCalls(server);
  });
  afterAll(() => server?.close());

  const inspect = async (id: string, env = "test"): Promise<Detail> => {
    const res = await owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/${env}/runs/${id}`);
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    return body;
  };

  it("a run lists the runs continuing it, oldest first, of its own app and environment only; each follow-up names the run it continues", async () => {
    const first = await calls.startRun({ user: "u1", model: "svc/echo", prompt: "Hello" });
    expect(first.status).toBe(200);
    const firstId = first.runId!;
    await calls.ended(firstId);
    // Two follow-ups of the same run (a conversation may branch), a second apart.
    const followUps: string[] = [];
    for (const prompt of ["again", "once more"]) {
      server.clock.advance(1);
      const id = await startFollowUp(calls, { user: "u1", model: "svc/echo", prompt }, firstId);
      await calls.ended(id);
      console.info(`follow-up ${id}: linked by ${await linkOf(server, id, firstId)}`);
      followUps.push(id);
    }
    // Runs of another app and of the other environment naming it (no API makes such a link: the rows say so here) are never its follow-ups.
    const other = await server.services.keys.createApp("Another app", "test");
    const live = await server.services.keys.createKeys(server.dev.appId, "live");
    const strangers = [await echoRunWith(server, other.appKey, "u1"), await echoRunWith(server, live.appKey, "u1")];
    for (const id of strangers) await server.db.query(`UPDATE runs SET previous_run_id = $1 WHERE id = $2`, [firstId, id]);

    const head = await inspect(firstId);
    expect(head.previousRunId).toBeNull();
    expect(head.continuedBy.map((r) => r.id)).toEqual(followUps);
    expect(head.continuedBy.map((r) => r.status)).toEqual(["completed", "completed"]);
    expect(Date.parse(head.continuedBy[0].createdAt)).toBeLessThan(Date.parse(head.continuedBy[1].createdAt));
    const text = JSON.stringify(head);
    for (const id of strangers) expect(text).not.toContain(id);

    for (const id of followUps) {
      const next = await inspect(id);
      expect(next.previousRunId).toBe(firstId);
      expect(next.continuedBy).toEqual([]);
    }
    // The other environment's run, read in its own environment: nothing continues it.
    expect((await inspect(strangers[1], "live")).continuedBy).toEqual([]);
  });
});

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";
describe.skipIf(!chromiumAvailable && !required)("a run's conversation on the run inspector page, in a real browser", () => {
  let server: TestServer;
  let browser: Browser;
  let owner: SignedInOwner;
  let firstId: string;
  let secondId: string;
  const message = "Please answer in French, and keep it short.";

  beforeAll(async () => {
    // A running clock: the app's answer and the message are placed among the events by their times, as they happen.
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    owner = await signInOwner(server);
    browser = await launchBrowser();
    const calls = runCalls(server);

    // A run, then a follow-up that calls the app's tool; while it waits on the answer the user steers it.
    const first = await calls.startRun({ user: "u1", model: "svc/echo", prompt: "Hello" });
    expect(first.status).toBe(200);
    firstId = first.runId!;
    await calls.ended(firstId);
    server.clock.advance(1);
    secondId = await startFollowUp(calls, { user: "u1", model: "svc/echo", prompt: JSON.stringify([{ call: "lookup", arguments: { q: "weather" } }, { say: "found {{result}}" }]), tools: [{ name: "lookup" }] }, firstId);
    const [call] = await pollUntil(() => server.db.prisma.toolCall.findMany({ where: { runId: secondId } }), (c) => c.length === 1, 20_000, "the tool call");
    const sent = await server.fetch(`/v1/runs/${secondId}/messages`, { method: "POST", headers: calls.headers(), body: JSON.stringify({ content: message }) });
    const steered = sent.status === 202 || sent.status === 200;
    console.info(steered ? `message to ${secondId}: sent by the API` : `POST /v1/runs/:id/messages answered ${sent.status}: the message is stored in the database instead`);
    const answer = await server.fetch(`/v1/runs/${secondId}/tool_result`, { method: "POST", headers: calls.headers(), body: JSON.stringify({ callId: call.callId, result: { sky: "clear" } }) });
    expect(answer.status, await answer.clone().text()).toBe(200);
    await calls.ended(secondId);
    console.info(`follow-up ${secondId}: linked by ${await linkOf(server, secondId, firstId)}`);
    if (!steered) {
      const [asked] = await server.db.query<{ seq: number }>(`SELECT seq FROM run_events WHERE run_id = $1 AND kind = 'tool_call' ORDER BY seq LIMIT 1`, [secondId]);
      await seedUserMessage(server, secondId, asked.seq, message, "next_turn");
    }
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  const runPath = (id: string) => `/dashboard/apps/${server.dev.appId}/test/runs/${id}`;
  const openAt = async (width: number) => {
    const context = await contextAt(browser, width);
    const at = owner.cookie.indexOf("=");
    await context.addCookies([{ name: owner.cookie.slice(0, at), value: owner.cookie.slice(at + 1), url: server.url, httpOnly: true, sameSite: "Strict" }]);
    const page = await context.newPage();
    return watch(page, server.url);
  };
  const heading = (page: Page, id: string) => page.getByRole("heading", { level: 1, name: `Run ${id}` }).waitFor({ timeout: 30_000 });
  const timelineLines = async (page: Page) => (await page.getByRole("region", { name: "Event timeline" }).locator("ol.timeline > li").allInnerTexts()).map((t) => t.replace(/\s+/g, " "));

  it("the owner's read: the follow-up names the run it continues, that run the follow-up; the message is among the follow-up's events", async () => {
    const read = async (id: string) => (await (await owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/test/runs/${id}`)).json()) as Detail;
    const [first, second] = [await read(firstId), await read(secondId)];
    expect(first).toMatchObject({ previousRunId: null, continuedBy: [{ id: secondId, status: "completed" }] });
    expect(second).toMatchObject({ previousRunId: firstId, continuedBy: [] });
    const kinds = second.events.map((e) => e.kind);
    expect(kinds.indexOf("tool_call")).toBeLessThan(kinds.indexOf("user_message"));
    expect(kinds.indexOf("user_message")).toBeLessThan(kinds.indexOf("run_completed"));
    expect(second.events.find((e) => e.kind === "user_message")?.data).toMatchObject({ content: message, delivery: "next_turn" });
  });

  for (const width of [1280, 390]) {
    it(`at ${width} px: the first run's page links to its follow-up, which links back, in the app; the user's message is in the timeline where it arrived`, async () => {
      const w = await openAt(width);
      const { page } = w;
      try {
        await page.goto(`${server.url}${runPath(firstId)}`);
        await heading(page, firstId);
        const conversation = page.getByRole("region", { name: "Conversation" });
        await conversation.waitFor({ timeout: 20_000 });
        expect((await conversation.innerText()).replace(/\s+/g, " ")).toMatch(new RegExp(`Continued by ${secondId} completed`));
        expect(await conversation.getByText("Continues", { exact: true }).count()).toBe(0);
        await page.screenshot({ path: path.join(SHOTS, `run-conversation-first-${width}.png`), fullPage: true });

        // An in-app link: the page moves without loading the app again (a value left on the window stays).
        await page.evaluate(() => ((window as unknown as { svcStay: number }).svcStay = 1));
        await conversation.getByRole("link", { name: secondId }).click();
        await heading(page, secondId);
        expect(new URL(page.url()).pathname).toBe(runPath(secondId));
        expect(await page.evaluate(() => (window as unknown as { svcStay?: number }).svcStay)).toBe(1);
        const back = page.getByRole("region", { name: "Conversation" }).getByRole("link", { name: firstId });
        await back.waitFor({ timeout: 20_000 });
        expect((await page.getByRole("region", { name: "Conversation" }).innerText()).replace(/\s+/g, " ")).toContain(`Continues ${firstId}`);
        expect(await back.getAttribute("href")).toBe(runPath(firstId));

        // The user's message, as they wrote it and when it went in, between the tool call and the turn after the answer.
        const timeline = page.getByRole("region", { name: "Event timeline" });
        const said = timeline.locator("li.event-user_message");
        expect(await said.count()).toBe(1);
        expect((await said.innerText()).replace(/\s+/g, " ")).toContain(`Message from the user before the next model call: ${message}`);
        const lines = await timelineLines(page);
        const at = (text: string) => lines.findIndex((l) => l.includes(text));
        expect(at("Called lookup")).toBeGreaterThan(-1);
        expect(at("Called lookup")).toBeLessThan(at("Message from the user"));
        expect(at("Message from the user")).toBeLessThan(at("run completed"));
        // Opened: the message whole, then the event's data.
        await said.locator("summary").click();
        expect(await said.locator("blockquote.user-message").innerText()).toBe(message);

        expect(await fitsWidth(page), (await overflowing(page)).join(", ")).toBe(true);
        await page.screenshot({ path: path.join(SHOTS, `run-conversation-${width}.png`), fullPage: true });
        expect(await axeViolations(page)).toEqual([]);
        expect(w.pageErrors).toEqual([]);
        expect(w.consoleErrors).toEqual([]);
        expect(w.foreign).toEqual([]);
      } finally {
        await page.context().close();
      }
    }, 120_000);
  }
});
