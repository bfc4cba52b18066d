import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer } from "../helpers/requests.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";
import { completedCheckout, startStripeStandIn, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { connectAccount, deliver, startHandback, stripeEnv, unixNow, writePlans } from "../helpers/billing.js";
import type { Tenant } from "../../server/keys/keys.js";
import { signInOwner, type SignedInOwner } from "../helpers/owner.js";
import { dayRange, usageCsv, usageSummary } from "../../server/ledger/usage-summary.js";
import { conversions } from "../../server/billing/conversions.js";
import { Svc } from "@svc/sdk";
import { pollUntil } from "../helpers/process.js";
import { MAX_INSPECTED_PAYLOAD_BYTES } from "@svc/contract";
import { runCalls } from "../helpers/run-calls.js";

/**
 * The dashboard's data, at the service level, on both databases: after real
 * requests of the app (chat on `svc/echo`, a handed-back run and its reported
 * usage, Stripe's events through the stand-in, webhooks to a real receiver),
 * what the owner's reads say. The other environment sees none of it.
 */
onEachDatabase("owner data services on $db.name", (db) => {
  let server: TestServer;
  let stripe: StripeStandIn;
  let receiver: Receiver;
  let test: Tenant;
  let live: Tenant;
  const app = () => ({ ...bearer(server.dev.appKey), "content-type": "application/json" });
  const chat = async (user: string, content = "hello") => {
    const res = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "svc/echo", user, messages: [{ role: "user", content }] }) });
    expect(res.status, await res.clone().text()).toBe(200);
  };

  beforeAll(async () => {
    stripe = await startStripeStandIn();
    receiver = await startReceiver();
    server = await startTestServerOn(db, { ...stripeEnv(stripe), WEBHOOK_RETRY_SCHEDULE: "0.2", WEBHOOK_TIMEOUT_MS: "1000", WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
    test = { appId: server.dev.appId, environment: "test" };
    live = { appId: server.dev.appId, environment: "live" };
    await writePlans(server);
    expect((await connectAccount(server, stripe)).status).toBe(200);
    const session = await server.fetch("/v1/end_users/session", { method: "POST", headers: app(), body: JSON.stringify({ user: "ann", email: "ann@example.com" }) });
    expect(session.status).toBe(200);
  });
  afterAll(async () => {
    await server?.close();
    await stripe?.close();
    await receiver?.close();
  });

  it("users: searched by id or email, newest first, paged; one user with machines and sessions", async () => {
    await server.services.users.assignPlan(test, "bob", "manual");
    await chat("bob");
    await chat('odd,"user"\nx');
    const { directory } = server.services;
    const first = await directory.list(test, { limit: 2 });
    expect(first.data.map((u) => u.id)).toEqual(['odd,"user"\nx', "bob"]);
    expect(first.hasMore).toBe(true);
    const second = await directory.list(test, { limit: 2, cursor: first.nextCursor! });
    expect(second.data.map((u) => u.id)).toEqual(["ann"]);
    expect(second.hasMore).toBe(false);
    expect((await directory.list(test, { q: "EXAMPLE.com", limit: 50 })).data.map((u) => u.id)).toEqual(["ann"]);
    expect((await directory.list(test, { q: "%", limit: 50 })).data).toEqual([]);
    // `runs` is the allowance's count: an `svc/echo` answer is free and not counted.
    const bob = (await directory.list(test, { q: "bob", limit: 50 })).data[0];
    expect(bob).toMatchObject({ id: "bob", plan: { slug: "manual", name: "Manual" }, subscriptionStatus: "active", runs: 0, machines: 0, online: 0, currency: "usd" });
    expect(bob.lastRunAt).not.toBeNull();
    const ann = await directory.get(test, "ann");
    expect(ann.user.email).toBe("ann@example.com");
    expect(ann.sessions).toHaveLength(1);
    expect(ann.sessions[0].live).toBe(true);
    expect(ann.machines).toEqual([]);
    await expect(directory.get(live, "ann")).rejects.toMatchObject({ code: "not_found" });
    expect((await directory.list(live, { limit: 50 })).data).toEqual([]);
  });

  it("usage: summary by day and cost class with top users; the CSV of the range, escaped", async () => {
    const range = dayRange({}, server.clock.now());
    await expect.poll(async () => (await usageSummary(server.db, test, range)).totals.runs).toBe(2);
    const summary = await usageSummary(server.db, test, range);
    expect(summary.currency).toBe("usd");
    expect(summary.byCostClass.map((c) => c.costClass)).toContain("free");
    expect(summary.days.every((d) => d.day === range.to)).toBe(true);
    expect(summary.topUsers.map((u) => u.user)).toEqual(expect.arrayContaining(["bob", 'odd,"user"\nx']));
    const sum = summary.days.reduce((a, d) => a + d.runs, 0);
    expect(sum).toBe(summary.totals.runs);
    expect((await usageSummary(server.db, live, range)).totals.runs).toBe(0);
    let csv = "";
    for await (const chunk of usageCsv(server.db, test, range)) csv += String(chunk);
    const lines = csv.split("\r\n");
    expect(lines[0]).toBe("id,created_at,user,run_id,cost_class,kind,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,amount_micros,currency,period");
    // A user id with a comma, quotes and a newline stays one quoted cell.
    expect(csv).toContain(`,"odd,""user""\nx",`);
    expect(lines.at(-1)).toBe("");
    const ids = lines.slice(1, -1).filter((l) => /^\d+,/.test(l)).map((l) => Number(l.split(",")[0]));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(ids).toHaveLength(2);
    let liveCsv = "";
    for await (const chunk of usageCsv(server.db, live, range)) liveCsv += String(chunk);
    expect(liveCsv.split("\r\n").filter(Boolean)).toHaveLength(1);
    expect(() => dayRange({ from: "2026-02-31" }, server.clock.now())).toThrow(/not a day/);
    expect(() => dayRange({ from: "2026-11-10", to: "2026-11-01" }, server.clock.now())).toThrow(/after/);
  });

  it("runs: filtered and paged newest first; one run with events, ledger, and the usage reported after a handback", async () => {
    await server.services.users.assignPlan(test, "carol", "manual");
    expect((await startHandback(server, "carol")).code).toBe("serve_in_app");
    const { runInspector } = server.services;
    const handed = await runInspector.list(test, { status: "handed_back", limit: 50 });
    expect(handed.data.map((r) => r.user)).toEqual(["carol"]);
    const id = handed.data[0].id;
    const report = await server.fetch(`/v1/runs/${id}/usage`, { method: "POST", headers: app(), body: JSON.stringify({ inputTokens: 12, outputTokens: 34, costMicros: 500 }) });
    expect(report.status, await report.clone().text()).toBe(200);
    const detail = await runInspector.get(test, id);
    expect(detail.reportedUsage).toMatchObject({ inputTokens: 12, outputTokens: 34 });
    expect(detail.ledger.map((r) => r.kind)).toContain("app_usage");
    const all = await runInspector.list(test, { limit: 1 });
    expect(all.data[0].id).toBe(id);
    const next = await runInspector.list(test, { limit: 50, cursor: all.nextCursor! });
    expect(next.data.map((r) => r.id)).not.toContain(id);
    const bobs = await runInspector.list(test, { user: "bob", limit: 50 });
    expect(bobs.data).toHaveLength(1);
    const echo = await runInspector.get(test, bobs.data[0].id);
    // An `svc/echo` answer is recorded as its run and one ledger row; it streams no stored events.
    expect(echo.ledger.length).toBeGreaterThan(0);
    expect(echo.reportedUsage).toBeNull();
    expect((await runInspector.list(test, { route: "app", limit: 50 })).data.map((r) => r.id)).toEqual([id]);
    expect((await runInspector.list(live, { limit: 50 })).data).toEqual([]);
    await expect(runInspector.get(live, id)).rejects.toMatchObject({ code: "not_found" });
  });

  it("runs: one run inspected carries each tool call with the app's answer (an error answer marked, a large one cut at 64 KiB) and each approval's decision and decider", async () => {
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1`, maxRetries: 0 });
    // Two-byte characters: 64 KiB falls inside one, and the cut must not split it.
    const big = `${"é".repeat(40_000)}end`;
    const run = svc.runs.create({
      user: "dora",
      model: "svc/echo",
      prompt: JSON.stringify([{ call: "lookup", arguments: { q: "paris" } }, { call: "broken" }, { call: "dump" }, { call: "send_mail", arguments: { to: "x@example.com" } }, { call: "wipe" }, { say: "done" }]),
      tools: [
        { name: "lookup", run: async () => ({ found: "Paris", n: 1 }) },
        {
          name: "broken",
          run: async () => {
            throw new Error("the tool broke");
          },
        },
        { name: "dump", run: async () => big },
        { name: "send_mail", needsApproval: true, run: async () => "sent" },
        { name: "wipe", needsApproval: true, run: async () => "wiped" },
      ],
      onApproval: (req) => (req.tool === "send_mail" ? { decision: "allow" } : { decision: "deny", reason: "not today" }),
    });
    expect((await run.result()).status).toBe("completed");
    const id = await run.runId;
    const { runInspector } = server.services;
    const detail = await runInspector.get(test, id);
    // The denied call never ran: no call of `wipe`, only its decision.
    expect(detail.toolCalls.map((c) => c.name)).toEqual(["lookup", "broken", "dump", "send_mail"]);
    const [lookup, broken, dump, sendMail] = detail.toolCalls;
    expect(JSON.parse(lookup.arguments)).toEqual({ q: "paris" });
    expect(lookup).toMatchObject({ isError: false, resultTruncated: false, argumentsTruncated: false });
    expect(JSON.parse(lookup.result!)).toEqual({ found: "Paris", n: 1 });
    expect(lookup.resultBytes).toBe(Buffer.byteLength(lookup.result!));
    expect(broken.isError).toBe(true);
    expect(JSON.parse(broken.result!)).toEqual({ error: "the tool broke" });
    // Cut at 64 KiB, at a character's start; the whole size said.
    const whole = JSON.stringify(big);
    expect(dump.resultTruncated).toBe(true);
    expect(dump.resultBytes).toBe(Buffer.byteLength(whole));
    expect(Buffer.byteLength(dump.result!)).toBeLessThanOrEqual(MAX_INSPECTED_PAYLOAD_BYTES);
    expect(Buffer.byteLength(dump.result!)).toBeGreaterThan(MAX_INSPECTED_PAYLOAD_BYTES - 4);
    expect(whole.startsWith(dump.result!)).toBe(true);
    expect(JSON.parse(sendMail.result!)).toBe("sent");
    for (const c of detail.toolCalls) {
      expect(c.answeredAt).not.toBeNull();
      expect(Date.parse(c.answeredAt!)).toBeGreaterThanOrEqual(Date.parse(c.calledAt));
    }
    expect(detail.approvals.map((a) => [a.tool, a.decision, a.reason])).toEqual([
      ["send_mail", "approved", null],
      ["wipe", "denied", "not today"],
    ]);
    // The SDK answers for the run's user: the decider is that user.
    expect(detail.approvals.map((a) => a.decidedBy)).toEqual(["dora", "dora"]);
    // The call of send_mail follows its grant.
    expect(Date.parse(sendMail.calledAt)).toBeGreaterThanOrEqual(Date.parse(detail.approvals[0].decidedAt!));

    // The same through HTTP, as the dashboard reads it; not from the other environment.
    const owner = await signInOwner(server);
    const env = `/v1/owner/apps/${server.dev.appId}/env`;
    const res = await owner.fetch(`${env}/test/runs/${id}`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { toolCalls: unknown }).toolCalls).toEqual(detail.toolCalls);
    expect((await owner.fetch(`${env}/live/runs/${id}`)).status).toBe(404);
    await expect(runInspector.get(live, id)).rejects.toMatchObject({ code: "not_found" });

    // A call the app has not answered: no answer while the run waits, and none after it ended without one.
    const calls = runCalls(server);
    const waiting = await calls.startRun({ user: "dora", model: "svc/echo", prompt: JSON.stringify([{ call: "lookup" }, { say: "never" }]), tools: [{ name: "lookup" }] });
    expect(waiting.status).toBe(200);
    await expect.poll(async () => (await runInspector.get(test, waiting.runId!)).toolCalls.length).toBe(1);
    const open = await runInspector.get(test, waiting.runId!);
    expect(open.run.status).toBe("waiting");
    expect(open.toolCalls[0]).toMatchObject({ name: "lookup", result: null, resultBytes: null, isError: null, answeredAt: null, resultTruncated: false });
    const cancel = await server.fetch(`/v1/runs/${waiting.runId}/cancel`, { method: "POST", headers: app(), body: "{}" });
    expect(cancel.status, await cancel.clone().text()).toBe(200);
    await calls.ended(waiting.runId!);
    expect((await runInspector.get(test, waiting.runId!)).toolCalls[0]).toMatchObject({ result: null, answeredAt: null });
  });

  it("conversions: a trial that converts and is paid (payment once per invoice), a trial cancelled", async () => {
    const now = unixNow(server);
    const trial = (id: string, user: string) =>
      subscriptionObject({ id, customer: `cus_${user}`, status: "trialing", price: "price_pro", periodStart: now, periodEnd: now + 14 * 86400, trialEnd: now + 14 * 86400, metadata: { svc_app: server.dev.appId, svc_environment: "test", svc_user: user, svc_plan: "pro" } });
    expect((await deliver(server, "checkout.session.completed", completedCheckout({ session: "cs_dee", subscription: "sub_dee", customer: "cus_dee", user: "dee", plan: "pro", appId: server.dev.appId, paid: false }), { created: now })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.created", trial("sub_dee", "dee"), { created: now + 1 })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.updated", { ...trial("sub_dee", "dee"), status: "active" }, { created: now + 2 })).status).toBe(200);
    const invoice = {
      id: "in_dee1",
      object: "invoice",
      customer: "cus_dee",
      amount_paid: 2000,
      currency: "usd",
      status: "paid",
      status_transitions: { paid_at: now + 3 },
      parent: { type: "subscription_details", subscription_details: { subscription: "sub_dee", metadata: {} } },
    };
    for (const type of ["invoice.paid", "invoice.payment_succeeded", "invoice.paid"]) expect((await deliver(server, type, invoice, { created: now + 3 })).status).toBe(200);
    // A trial's first invoice is of nothing: no payment.
    expect((await deliver(server, "invoice.paid", { ...invoice, id: "in_dee0", amount_paid: 0 }, { created: now + 1 })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.created", trial("sub_eve", "eve"), { created: now })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.deleted", { ...trial("sub_eve", "eve"), status: "canceled", ended_at: now + 5 }, { created: now + 5 })).status).toBe(200);

    const c = await conversions(server.db, test, dayRange({}, server.clock.now()));
    expect(c.perPlan).toEqual([{ plan: { slug: "pro", name: "Pro" }, trialsStarted: 2, converted: 1, cancelled: 1 }]);
    expect(c.series.reduce((a, d) => a + d.trialsStarted, 0)).toBe(2);
    expect(c.payments).toEqual([
      { id: expect.stringMatching(/^pay_/), user: "dee", plan: "pro", amountMicros: 20_000_000, currency: "usd", paidAt: new Date((now + 3) * 1000).toISOString(), trialStartedAt: new Date(now * 1000).toISOString() },
    ]);
    const empty = await conversions(server.db, live, dayRange({}, server.clock.now()));
    expect(empty).toMatchObject({ perPlan: [], series: [], payments: [], signals: { pauses: 0, thresholds: 0, upgraded: 0, recent: [] } });
  });

  it("conversions after a signal: thresholds reached and a run paused, each once, and the upgrade that followed within 7 days", async () => {
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    await svc.plans.create({ slug: "two-runs", name: "Two runs", allowance: { unit: "runs", limit: 2 } });
    await svc.users.setPlan("sig-fay", "two-runs");
    await svc.users.setPlan("sig-gus", "two-runs");
    const handback = (user: string) => server.fetch("/v1/runs", { method: "POST", headers: app(), body: JSON.stringify({ user, prompt: "x", route: { prefer: ["app"] } }) });
    // fay: 2 of 2 runs (80 % and 100 % reached at her second), then a run paused at its budget; gus: 1 of 2 (50 %), nothing.
    for (const user of ["sig-fay", "sig-fay", "sig-gus"]) expect((await handback(user)).status).toBe(409);
    const paused = svc.runs.create({ user: "sig-fay", model: "svc/echo", prompt: JSON.stringify([{ call: "t" }, { say: "done" }]), tools: [{ name: "t", run: async () => "ok" }], budget: { maxTokens: 1 } });
    const runId = await paused.runId;
    await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", 10_000, "paused");
    const before = await pollUntil(() => conversions(server.db, test, dayRange({}, server.clock.now())), (c) => c.signals.thresholds === 2 && c.signals.pauses === 1, 10_000, "the signals recorded");
    expect(before.signals.upgraded).toBe(0);
    await svc.runs.cancel(runId);
    // fay buys Pro.
    const now = unixNow(server);
    const sub = subscriptionObject({ id: "sub_fay", customer: "cus_fay", status: "active", price: "price_pro", periodStart: now, periodEnd: now + 30 * 86400, metadata: { svc_app: server.dev.appId, svc_environment: "test", svc_user: "sig-fay", svc_plan: "pro" } });
    expect((await deliver(server, "customer.subscription.created", sub, { created: now + 1 })).status).toBe(200);
    const c = await conversions(server.db, test, dayRange({}, server.clock.now()));
    expect(c.signals).toMatchObject({ pauses: 1, thresholds: 2, upgraded: 1 });
    const mine = c.signals.recent.filter((x) => x.user.startsWith("sig-"));
    expect(mine.map((x) => [x.user, x.kind, x.detail, x.upgradedTo]).sort()).toEqual([
      ["sig-fay", "paused", "run_budget", "pro"],
      ["sig-fay", "threshold", "100% of allowance", "pro"],
      ["sig-fay", "threshold", "80% of allowance", "pro"],
    ]);
    expect(mine.find((x) => x.kind === "paused")!.runId).toBe(runId);
  });

  it("webhooks: a test ping reaches only that endpoint whatever its filter; a resend is the same payload and webhook-id, a new attempt; a removed endpoint is 409", async () => {
    const { webhooks } = server.services;
    const other = await startReceiver();
    try {
      const one = await webhooks.endpoints.create(test, { url: `${receiver.url}/one`, events: ["run.finished"] });
      await webhooks.endpoints.create(test, { url: `${other.url}/two` });
      const { deliveryId } = await webhooks.manual.ping(test, one.id);
      const [got] = await receiver.waitFor(1);
      expect(got.headers["webhook-id"]).toBe(deliveryId);
      expect(verified(one.secret, got)).toMatchObject({ type: "test.ping", data: { endpointId: one.id } });
      await expect.poll(async () => (await webhooks.log.get(test, deliveryId)).status).toBe("delivered");
      const resent = await webhooks.manual.resend(test, deliveryId);
      expect(resent.status).toBe("pending");
      const [, again] = await receiver.waitFor(2);
      expect(again.headers["webhook-id"]).toBe(deliveryId);
      expect(again.body).toBe(got.body);
      await expect.poll(async () => (await webhooks.log.get(test, deliveryId)).attempts.map((a) => a.attempt)).toEqual([1, 2]);
      expect(other.received).toHaveLength(0);
      await expect(webhooks.manual.ping(live, one.id)).rejects.toMatchObject({ code: "not_found" });
      await expect(webhooks.manual.resend(live, deliveryId)).rejects.toMatchObject({ code: "not_found" });
      await webhooks.endpoints.disable(test, one.id);
      await expect(webhooks.manual.ping(test, one.id)).rejects.toMatchObject({ code: "endpoint_disabled" });
      await expect(webhooks.manual.resend(test, deliveryId)).rejects.toMatchObject({ code: "endpoint_disabled" });
    } finally {
      await other.close();
    }
  });

  it("through HTTP as a signed-in owner: the same data; the live environment empty; another app's owner refused", async () => {
    const owner: SignedInOwner = await signInOwner(server);
    const env = `/v1/owner/apps/${server.dev.appId}/env`;
    const users = await owner.fetch(`${env}/test/users?q=ann`);
    expect(users.status, await users.clone().text()).toBe(200);
    expect(((await users.json()) as { data: { id: string }[] }).data.map((u) => u.id)).toEqual(["ann"]);
    const csv = await owner.fetch(`${env}/test/usage/export`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get("content-type")).toMatch(/^text\/csv/);
    expect((await csv.text()).split("\r\n")[0]).toMatch(/^id,created_at,user,/);
    const summary = (await (await owner.fetch(`${env}/test/usage/summary`)).json()) as { totals: { runs: number } };
    expect(summary.totals.runs).toBeGreaterThan(0);
    const conv = (await (await owner.fetch(`${env}/test/conversions`)).json()) as { payments: unknown[] };
    expect(conv.payments).toHaveLength(1);
    for (const path of ["users", "runs", "webhook_deliveries"]) {
      const res = await owner.fetch(`${env}/live/${path}`);
      expect(res.status).toBe(200);
      expect(((await res.json()) as { data: unknown[] }).data).toEqual([]);
    }
    expect(((await (await owner.fetch(`${env}/live/usage/summary`)).json()) as { totals: { runs: number } }).totals.runs).toBe(0);
    const runs = (await (await owner.fetch(`${env}/test/runs?status=handed_back&user=carol`)).json()) as { data: { id: string }[] };
    const run = await owner.fetch(`${env}/test/runs/${runs.data[0].id}`);
    expect(((await run.json()) as { reportedUsage: unknown }).reportedUsage).toMatchObject({ inputTokens: 12, outputTokens: 34 });
    expect((await owner.fetch(`${env}/live/runs/${runs.data[0].id}`)).status).toBe(404);
    const endpoint = await owner.fetch(`${env}/test/webhook_endpoints`, { method: "POST", body: { url: `${receiver.url}/owner`, events: ["plan.changed"] } });
    expect(endpoint.status).toBe(201);
    const { id } = (await endpoint.json()) as { id: string };
    const ping = await owner.fetch(`${env}/test/webhook_endpoints/${id}/test`, { method: "POST" });
    expect(ping.status, await ping.clone().text()).toBe(202);
    const { deliveryId } = (await ping.json()) as { deliveryId: string };
    await expect.poll(() => receiver.received.some((r) => r.headers["webhook-id"] === deliveryId)).toBe(true);
    const stranger = await signInOwner(server, { appId: null });
    expect((await stranger.fetch(`${env}/test/users`)).status).toBe(404);
    expect((await server.fetch(`${env}/test/users`)).status).toBe(401);
  });
});
