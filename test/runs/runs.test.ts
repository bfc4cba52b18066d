import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Svc, PaymentRequiredError, ServeInAppError, ConflictError, NotFoundError, type RunEvent } from "@svc/sdk";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess, SANDBOX_REQUIRED } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { startModelStandIn, writeFakeClis, type ModelStandIn } from "../helpers/standins.js";
import { expectError } from "../helpers/requests.js";
import { completedCheckout, nested, startStripeStandIn, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { checkout, connectAccount, deliver, mintSession, stripeEnv, unixNow } from "../helpers/billing.js";

/**
 * Runs end to end through the SDK, on each database: the real server, a real
 * `svc-worker start` process serving a model stand-in (and a fake Claude Code
 * CLI), and the app's side driven by the SDK's run driver.
 */
onEachDatabase("runs through the SDK on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let stripe: StripeStandIn;
  let svc: Svc;
  let workdir: string;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    // Stripe (its real library, against the stand-in) sells the upgrade that resumes a paused run.
    stripe = await startStripeStandIn();
    server = await startTestServerOn(db, stripeEnv(stripe), { runningClock: true });
    expect((await connectAccount(server, stripe)).status).toBe(200);
    model = await startModelStandIn();
    const dir = tempDir("svc-run-standins-");
    const bin = writeFakeClis(dir);
    workdir = fs.mkdtempSync(path.join(dir, "project-"));
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    // alice: a model runtime; carol: Claude Code only (her own subscription).
    const alice = await pairViaApi(server, server.dev, "alice", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } });
    const carol = await pairViaApi(server, server.dev, "carol", { workdir, runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false }, policy: { agents: { "claude-code": true }, sandbox: { required: SANDBOX_REQUIRED } } });
    for (const m of [alice, carol]) {
      const w = spawnWorker(["start"], m.home, { PATH: `${bin}${path.delimiter}${process.env.PATH}` });
      workers.push(w);
      await w.waitFor(/Connected/);
    }
  }, 60_000);
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await model?.close();
    await stripe?.close();
    removeTempDirs();
  });

  const usageRows = (runId: string) => server.db.prisma.usageRow.findMany({ where: { runId }, orderBy: { id: "asc" } });
  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }

  it("runs several tool calls on the user's model runtime; a tool's exception reaches the model as an error; every turn is metered", async () => {
    const calls: unknown[] = [];
    const run = svc.runs.create({
      user: "alice",
      prompt: "What is the weather and the news?",
      tools: [
        { name: "weather", parameters: { type: "object" }, run: (args) => (calls.push(args), { temp: 21 }) },
        { name: "news", run: () => Promise.resolve("all quiet") },
        {
          name: "stocks",
          run: () => {
            throw new Error("market closed");
          },
        },
      ],
    });
    const events = await collect(run);
    const result = await run.result();
    expect(result.status).toBe("completed");
    expect(result.route).toBe("user-hardware");
    expect(result.runtime).toBe("ollama");
    // The third tool threw: the model was told so, and said it.
    expect(result.output).toBe('The tool said: Error: {"error":"market closed"}');
    expect(calls).toEqual([{ city: "Paris" }]);
    const kinds = events.map((e) => e.kind);
    expect(kinds[0]).toBe("run_started");
    expect(kinds.filter((k) => k === "tool_call")).toHaveLength(3);
    expect(kinds.filter((k) => k === "usage")).toHaveLength(4);
    expect(kinds.at(-1)).toBe("run_completed");
    // The model saw each result in order, the error marked as such.
    const last = model.requests.at(-1) as { messages: { role: string; content: string }[] };
    expect(last.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual(['{"temp":21}', "all quiet", 'Error: {"error":"market closed"}']);
    const runId = await run.runId;
    const rows = await usageRows(runId);
    expect(rows.map((r) => [r.kind, r.costClass, r.uniqueKey])).toEqual([
      ["run", "user_hardware", `run:${runId}`],
      ...[1, 2, 3, 4].map((t) => ["tokens", "user_hardware", `tokens:${runId}:${t}`]),
    ]);
    const stored = await svc.runs.get(runId);
    expect(stored).toMatchObject({ status: "completed", turns: 4, usage: { inputTokens: 48, outputTokens: 28 }, output: result.output, lastEventId: events.length });
  });

  it("asks the app before tools that need approval: a grant runs the tool, a denial reaches the model with its reason", async () => {
    const asked: string[] = [];
    const run = svc.runs.create({
      user: "alice",
      prompt: "Send the mail, then delete everything.",
      tools: [
        { name: "send_mail", needsApproval: true, run: () => "sent" },
        { name: "delete_all", needsApproval: true, run: () => "deleted" },
      ],
      onApproval: (req) => {
        asked.push(`${req.what}:${req.tool}`);
        return req.tool === "send_mail" ? true : { decision: "no way", reason: "too dangerous" };
      },
    });
    const events = await collect(run);
    const result = await run.result();
    expect(asked).toEqual(["tool:send_mail", "tool:delete_all"]);
    expect(result.status).toBe("completed");
    expect(result.output).toBe("The tool said: Error: the user denied this call: too dangerous");
    // The granted call came as a tool call after its approval; the denied one never did.
    const order = events.filter((e) => e.kind === "approval_request" || e.kind === "tool_call").map((e) => (e.kind === "tool_call" ? `call:${e.name}` : `ask:${e.tool}`));
    expect(order).toEqual(["ask:send_mail", "call:send_mail", "ask:delete_all"]);
    const approvals = await server.db.prisma.approval.findMany({ where: { runId: await run.runId }, orderBy: { createdAt: "asc" } });
    expect(approvals.map((a) => [a.decision, a.reason])).toEqual([
      ["allow", null],
      ["deny", "too dangerous"],
    ]);
  });

  it("cancels a run mid-stream: the worker's job stops, the text so far stays, the stream ends with run_cancelled", async () => {
    const run = svc.runs.create({ user: "alice", prompt: "Write a long essay [slow]" });
    const events: RunEvent[] = [];
    let cancelled = false;
    for await (const e of run) {
      events.push(e);
      if (!cancelled && events.filter((x) => x.kind === "text_delta").length === 5) {
        cancelled = true;
        await run.cancel("changed my mind");
      }
    }
    const result = await run.result();
    expect(result.status).toBe("cancelled");
    const end = events.at(-1)!;
    expect(end.kind).toBe("run_cancelled");
    const streamed = events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("");
    expect(end.kind === "run_cancelled" && end.output.startsWith(streamed.slice(0, 40))).toBe(true);
    expect(streamed.length).toBeLessThan("word ".repeat(200).length);
    expect((await svc.runs.get(await run.runId)).status).toBe("cancelled");
    // The worker was told to stop the job.
    await pollUntil(async () => workers[0].stdout, (out) => /✗ job_\w+ failed: cancelled/.test(out));
    // A second cancel is refused: the run has ended.
    await expect(svc.runs.cancel(await run.runId)).rejects.toBeInstanceOf(ConflictError);
  });

  it("hands a run back when the user has nothing reachable: counted, served by the app, its usage recorded once", async () => {
    const run = svc.runs.create({
      user: "dave",
      prompt: "Hello",
      serveInApp: async (h) => ({ output: `served in app for ${h.user}`, usage: { inputTokens: 5, outputTokens: 9, model: "gpt-app", costMicros: 1234 } }),
    });
    expect(await collect(run)).toEqual([]);
    const result = await run.result();
    expect(result).toMatchObject({ status: "handed_back", output: "served in app for dave", route: "app", usage: { inputTokens: 5, outputTokens: 9 } });
    const runId = await run.runId;
    const rows = await usageRows(runId);
    expect(rows.map((r) => [r.kind, r.costClass, Number(r.inputTokens), Number(r.outputTokens), Number(r.amountMicros)])).toEqual([
      ["run", "app_served", 0, 0, 0],
      ["app_usage", "app_served", 5, 9, 1234],
    ]);
    // Accepted once per run.
    await expect(svc.runs.reportUsage(runId, { inputTokens: 1, outputTokens: 1 })).rejects.toMatchObject({ status: 409, code: "usage_already_reported" });
    expect(await usageRows(runId)).toHaveLength(2);
    // Without a serving function the SDK throws, with the counted run's id.
    const err = await svc.runs.create({ user: "dave", prompt: "again" }).result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServeInAppError);
    expect((err as ServeInAppError & { runId?: string }).runId).toMatch(/^run_/);
  });

  it("answers no_compute when the route does not allow the app, and counts nothing", async () => {
    const before = await server.db.prisma.usageRow.count();
    const err = await svc.runs.create({ user: "erin", prompt: "Hi", route: { prefer: ["user-hardware", "user-subscription"] } }).result().catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 409, code: "no_compute" });
    expect(await server.db.prisma.usageRow.count()).toBe(before);
  });

  it("stops at the plan's allowance: 402 once used, nothing run or handed back; concurrent starts never pass it", async () => {
    const tenant = { appId: server.dev.appId, environment: server.dev.environment };
    await server.db.prisma.plan.create({ data: { id: "plan_free", ...tenant, slug: "free", name: "Free", allowanceUnit: "runs", allowance: 5n, overage: false, isDefault: true } });
    try {
      const served = () => ({ output: "x", usage: { inputTokens: 1, outputTokens: 1 } });
      const results = await Promise.allSettled(Array.from({ length: 50 }, () => svc.runs.create({ user: "frank", prompt: "go", serveInApp: async () => served() }).result()));
      const ok = results.filter((r) => r.status === "fulfilled");
      const refused = results.filter((r) => r.status === "rejected").map((r) => (r as PromiseRejectedResult).reason);
      expect(ok).toHaveLength(5);
      expect(refused).toHaveLength(45);
      for (const e of refused) expect(e).toBeInstanceOf(PaymentRequiredError);
      expect(refused[0]).toMatchObject({ status: 402, code: "allowance_exhausted" });
      // Each refusal tells the app where the user stands and when it resets, without a second call.
      const standing = (refused[0] as PaymentRequiredError).allowance!;
      expect(standing).toMatchObject({ unit: "runs", limit: 5, used: 5, remaining: 0, reached: true });
      expect(Date.parse(standing.resetsAt)).toBeGreaterThan(server.clock.now().getTime());
      expect(standing).toEqual((await svc.users.retrieve("frank")).allowance);
      const frank = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: "frank" } });
      expect(await server.db.prisma.usageRow.count({ where: { endUserId: frank.id, kind: "run" } })).toBe(5);
      expect(await server.db.prisma.run.count({ where: { endUserId: frank.id } })).toBe(5);
    } finally {
      await server.db.prisma.plan.update({ where: { id: "plan_free" }, data: { isDefault: false, archivedAt: new Date() } });
    }
  });

  it("pauses at the plan's spend ceiling between turns (not fails), and the same run resumes and completes once the user upgrades", async () => {
    const tenant = { appId: server.dev.appId, environment: server.dev.environment };
    await server.db.prisma.plan.create({ data: { id: "plan_capped", ...tenant, slug: "capped", name: "Capped", allowance: null, overage: true, spendCeilingMicros: 1000n, isDefault: true } });
    await server.db.prisma.plan.create({ data: { id: "plan_roomy", ...tenant, slug: "roomy", name: "Roomy", priceMicros: 10_000_000n, allowance: null, overage: true, spendCeilingMicros: 100_000_000n, stripePriceId: "price_roomy" } });
    try {
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const run = svc.runs.create({ user: "alice", prompt: "weather", tools: [{ name: "weather", run: async () => (await held, "sunny") }] });
      const events: RunEvent[] = [];
      const reading = (async () => {
        for await (const e of run) events.push(e);
      })();
      await pollUntil(async () => run.lastEventId, (id) => id !== null && id >= 3);
      // While the run waits on its tool, the same user's handed-back run costs the app 5000 micros.
      const handback = svc.runs.create({ user: "alice", prompt: "x", route: { prefer: ["app"] }, serveInApp: async () => ({ output: "y", usage: { inputTokens: 1, outputTokens: 1, costMicros: 5000 } }) });
      expect((await handback.result()).status).toBe("handed_back");
      release();
      const runId = await run.runId;
      const paused = await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", 15_000, "the run paused");
      expect(paused.turns).toBe(1);
      expect(Date.parse(paused.pausedAt!)).toBeGreaterThan(0);
      const pause = await pollUntil(async () => events.find((e) => e.kind === "run_paused"), (e) => e !== undefined);
      if (pause?.kind !== "run_paused") throw new Error("no run_paused");
      // The pause says which limit, the amounts, where the user stands (as the user view says it) and when it expires.
      expect(pause).toMatchObject({ limit: "spend_ceiling", budget: null, allowance: { spend: { ceilingMicros: 1000, reached: true, remainingMicros: 0 } } });
      expect(pause.allowance.spend.usedMicros).toBeGreaterThanOrEqual(5000);
      expect(pause.allowance).toEqual((await svc.users.retrieve("alice")).allowance);
      expect(pause.message).toMatch(/reached the plan's ceiling of 1000 micros/);
      expect(Date.parse(pause.expiresAt) - Date.parse(pause.pausedAt)).toBe(24 * 3600 * 1000);
      // A pause holds no job on the machine: nothing runs while it lasts.
      await new Promise((r) => setTimeout(r, 300));
      expect((await svc.runs.get(runId)).status).toBe("paused");
      // The upgrade through checkout (as the components start it), then Stripe's events: the same run resumes on its own and completes.
      const { session } = await mintSession(server, "alice");
      expect((await checkout(server, session, { plan: "roomy" })).status).toBe(200);
      const sent = stripe.checkouts.at(-1)!;
      const t = unixNow(server);
      const bought = completedCheckout({ session: String(sent.session.id), subscription: `sub_alice_${db.name}`, customer: "cus_alice", user: "alice", plan: "roomy", appId: server.dev.appId });
      expect((await deliver(server, "checkout.session.completed", bought, { created: t })).status).toBe(200);
      const subscription = subscriptionObject({ id: `sub_alice_${db.name}`, customer: "cus_alice", status: "active", price: "price_roomy", periodStart: t, periodEnd: t + 30 * 86400, metadata: nested(sent.fields, "subscription_data[metadata]") });
      expect((await deliver(server, "customer.subscription.created", subscription, { created: t + 1 })).status).toBe(200);
      const result = await run.result();
      await reading;
      expect(result.status).toBe("completed");
      const kinds = events.map((e) => e.kind);
      expect(kinds.indexOf("run_paused")).toBeLessThan(kinds.indexOf("run_resumed"));
      expect(events.find((e) => e.kind === "run_resumed")).toMatchObject({ limit: "spend_ceiling", reason: "plan_changed" });
      const done = await svc.runs.get(runId);
      expect(done).toMatchObject({ status: "completed", turns: 2, pausedAt: null });
      // Its events across the pause are contiguous, and its ledger exact: the run counted once, each turn once.
      const seqs = (await server.db.query<{ seq: number }>(`SELECT seq FROM run_events WHERE run_id = $1 ORDER BY seq`, [runId])).map((r) => Number(r.seq));
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
      const rows = await usageRows(runId);
      expect(rows.map((r) => r.kind).sort()).toEqual(["run", "tokens", "tokens"]);
      // The ceiling the run started under is kept with its row (svc_start_run writes it); between turns the driver reads the plan as it is now.
      const [stored] = await server.db.query<{ ceiling: string | null }>(`SELECT request->>'spendCeilingMicros' AS ceiling FROM runs WHERE id = $1`, [runId]);
      expect(stored.ceiling).toBe("1000");
    } finally {
      // Her subscription ends: she is back on the default plan for the tests after.
      await server.db.query(`UPDATE subscriptions SET status = 'canceled' WHERE stripe_subscription_id = $1`, [`sub_alice_${db.name}`]);
      await server.db.prisma.plan.update({ where: { id: "plan_capped" }, data: { isDefault: false, archivedAt: new Date() } });
      await server.db.prisma.plan.update({ where: { id: "plan_roomy" }, data: { archivedAt: new Date() } });
    }
  });

  it("prices each turn's tokens past a tokens plan's allowance in its ledger row; the overage then meets the spend ceiling between turns and pauses the run, which the app's PUT /v1/users/:id/plan resumes", async () => {
    const tenant = { appId: server.dev.appId, environment: server.dev.environment };
    // No tokens included, 1,000 µ per 1,000 tokens (1 µ a token), a ceiling 1 µ above what alice spent so far: the first turn's tokens reach it.
    const [spent] = await server.db.query<{ s: string | number | null }>(`SELECT sum(u.amount_micros) AS s FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id WHERE e.external_id = 'alice'`);
    await server.db.prisma.plan.create({
      data: { id: "plan_tokmeter", ...tenant, slug: "tokmeter-runs", name: "Metered tokens", allowanceUnit: "tokens", allowance: 0n, overage: true, overagePriceMicros: 1000n, spendCeilingMicros: BigInt(spent.s ?? 0) + 1n, isDefault: true },
    });
    try {
      const run = svc.runs.create({ user: "alice", prompt: "weather", tools: [{ name: "weather", run: async () => "sunny" }] });
      const runId = await run.runId;
      await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", 15_000, "the run paused");
      const rows = await usageRows(runId);
      const tokens = rows.find((r) => r.kind === "tokens")!;
      expect(tokens.inputTokens + tokens.outputTokens).toBeGreaterThan(0n);
      expect(tokens.amountMicros).toBe(tokens.inputTokens + tokens.outputTokens);
      expect(rows.find((r) => r.kind === "run")!.amountMicros).toBe(0n);
      // The app moves her to a plan without the ceiling (PUT /v1/users/:id/plan): the run resumes and completes, its second turn metered once.
      await server.db.prisma.plan.create({ data: { id: "plan_tokfree", ...tenant, slug: "tokfree", name: "Tokens, no ceiling", allowanceUnit: "tokens", allowance: null } });
      await svc.users.setPlan("alice", "tokfree");
      const result = await run.result();
      expect(result.status).toBe("completed");
      expect((await usageRows(runId)).filter((r) => r.kind === "tokens")).toHaveLength(2);
    } finally {
      await svc.users.setPlan("alice", null);
      await server.db.prisma.plan.update({ where: { id: "plan_tokmeter" }, data: { isDefault: false, archivedAt: new Date() } });
    }
  });

  it("re-attaches after a dropped stream: the rest arrives with no gap and no duplicate, and the run went on meanwhile", async () => {
    // A fetch that cuts the run's first stream right after its first tool call.
    let cut = false;
    const cutting: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const url = String(input instanceof Request ? input.url : input);
      if (cut || !url.endsWith("/v1/runs") || !res.body) return res;
      cut = true;
      const reader = res.body.getReader();
      let seen = "";
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const { value, done } = await reader.read();
          if (done) return controller.close();
          controller.enqueue(value);
          seen += new TextDecoder().decode(value);
          if (seen.includes("event: tool_call")) {
            await reader.cancel();
            controller.error(new TypeError("terminated"));
          }
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    const flaky = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1`, fetch: cutting });
    const run = flaky.runs.create({ user: "alice", prompt: "weather", tools: [{ name: "weather", run: () => "sunny" }] });
    const events = await collect(run);
    expect(cut).toBe(true);
    const result = await run.result();
    expect(result.status).toBe("completed");
    expect(result.output).toBe("The tool said: sunny");
    const stored = await svc.runs.get(await run.runId);
    expect(events).toHaveLength(stored.lastEventId);
    expect(events.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    // The whole stream read back from the start is the same, event for event.
    expect(await collect(svc.runs.events(await run.runId))).toEqual(events);
  });

  it("relays an agent runtime's run: its permission request becomes an approval, the CLI gets the answer", async () => {
    for (const allow of [true, false]) {
      const run = svc.runs.create({
        user: "carol",
        prompt: "List the files",
        route: { prefer: ["user-subscription"] },
        onApproval: (req) => (req.what === "permission" && req.tool === "Bash" && allow ? true : { decision: "deny", reason: "not today" }),
      });
      const events = await collect(run);
      const result = await run.result();
      expect(result).toMatchObject({ status: "completed", route: "user-subscription", runtime: "claude-code" });
      const ask = events.find((e) => e.kind === "approval_request");
      expect(ask).toMatchObject({ what: "permission", tool: "Bash", arguments: { command: "ls" } });
      expect(result.output).toBe(allow ? `Ran ls in ${fs.realpathSync(workdir)} (prompt: List the files)` : "Not allowed: not today (prompt: List the files)");
      const rows = await usageRows(await run.runId);
      expect(rows.map((r) => [r.kind, r.costClass])).toEqual([
        ["run", "user_subscription"],
        ["tokens", "user_subscription"],
      ]);
    }
  });

  it("stops at its limits with a reason: turns, and the deadline of a tool result", async () => {
    const turns = svc.runs.create({ user: "alice", prompt: "loop", limits: { maxTurns: 2 }, tools: ["a", "b", "c"].map((name) => ({ name, run: () => "ok" })) });
    await collect(turns);
    expect(await turns.result()).toMatchObject({ status: "failed", stopReason: "max_turns", error: { code: "max_turns" } });
    // A tool the app never answers (raw HTTP: the SDK would answer it).
    const res = await server.fetch("/v1/runs", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ user: "alice", prompt: "x", tools: [{ name: "slow" }], limits: { toolResultTimeoutMs: 1000 } }),
    });
    const text = await res.text();
    expect(text).toContain("event: tool_call");
    expect(text).toMatch(/event: run_failed\ndata: .*"stopReason":"tool_result_timeout"/);
  });

  it("refuses answers that do not fit, with a clear 4xx, changing nothing", async () => {
    let runId = "";
    let callId = "";
    const run = svc.runs.create({ user: "alice", prompt: "x", tools: [{ name: "t", run: async (_a, ctx) => ((runId = ctx.runId), (callId = ctx.callId), "fine") }] });
    await run.result();
    const post = (p: string, body: unknown, key = server.dev.appKey) =>
      server.fetch(p, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    await expectError(await post(`/v1/runs/${runId}/tool_result`, { callId, result: 1 }), 409, "already_answered");
    await expectError(await post(`/v1/runs/${runId}/tool_result`, { callId: "call_nope", result: 1 }), 409, "run_finished");
    await expectError(await post(`/v1/runs/run_nope/tool_result`, { callId, result: 1 }), 404, "not_found");
    await expectError(await post(`/v1/runs/${runId}/tool_result`, { callId, result: 1, user: "mallory" }), 404, "not_found");
    await expectError(await post(`/v1/runs/${runId}/approval`, { approvalId: "apr_x", decision: "allow" }), 409, "run_finished");
    await expectError(await post(`/v1/runs/${runId}/tool_result`, { callId }), 400, "invalid_request");
    await expectError(await post(`/v1/runs/${runId}/usage`, { inputTokens: 1, outputTokens: 1 }), 400, "invalid_request");
    // Another app's key sees no such run.
    const other = await server.services.keys.createApp("Other app", "test");
    await expectError(await post(`/v1/runs/${runId}/cancel`, {}, other.appKey), 404, "not_found");
    await expect(new Svc({ apiKey: other.appKey, baseUrl: `${server.url}/v1` }).runs.get(runId)).rejects.toBeInstanceOf(NotFoundError);
    const stored = await server.db.prisma.toolCall.findFirstOrThrow({ where: { runId, callId } });
    expect(stored.result).toBe("fine");
  });
  // Last: it moves the server's clock into the next month.
  it("a tokens plan that stops at its allowance pauses the run between turns; the next window resumes it (new_period), looked at when a plan changes", async () => {
    const tenant = { appId: server.dev.appId, environment: server.dev.environment };
    const [used] = await server.db.query<{ t: string | number | null }>(
      `SELECT sum(u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens) AS t FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id
        WHERE e.external_id = 'alice' AND u.period = $1`,
      [server.clock.now().toISOString().slice(0, 7)],
    );
    // One token left this month, and the plan stops there.
    await server.db.prisma.plan.create({ data: { id: "plan_tokstop", ...tenant, slug: "tokstop", name: "Tokens, stops", allowanceUnit: "tokens", allowance: BigInt(used.t ?? 0) + 1n, overage: false } });
    await svc.users.setPlan("alice", "tokstop");
    try {
      const run = svc.runs.create({ user: "alice", prompt: "weather", tools: [{ name: "weather", run: async () => "sunny" }] });
      const events: RunEvent[] = [];
      const reading = (async () => {
        for await (const e of run) events.push(e);
      })();
      const runId = await run.runId;
      await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", 15_000, "the run paused");
      const pause = events.find((e) => e.kind === "run_paused");
      expect(pause).toMatchObject({ limit: "allowance", allowance: { unit: "tokens", reached: true, remaining: 0 } });
      // The first of next month: the window the allowance is whole again in. A plan changed (any plan) makes paused runs look at once.
      const resetsAt = Date.parse((pause as { allowance: { resetsAt: string } }).allowance.resetsAt);
      server.clock.advance((resetsAt - server.clock.now().getTime()) / 1000 + 1);
      await svc.plans.update("tokstop", { name: "Tokens, stops (renamed)" });
      const result = await run.result();
      await reading;
      expect(result.status).toBe("completed");
      expect(events.find((e) => e.kind === "run_resumed")).toMatchObject({ limit: "allowance", reason: "new_period" });
    } finally {
      await svc.users.setPlan("alice", null);
    }
  });
});
