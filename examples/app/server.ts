/**
 * A small app server on svc, the way an app developer would write one: it mints
 * end-user sessions, sends its users to svc's hosted connect and billing pages,
 * starts agent runs with its own tools (one needing approval), serves handbacks
 * (`serve_in_app`) with its own stand-in model provider (the usage is reported
 * to svc for it), and reads usage.
 *
 *   SVC_BASE_URL=http://127.0.0.1:4000/v1 SVC_API_KEY=sk_svc_... npm run example
 *
 * Plain node:http and JSON, so the svc parts stand out. Endpoints (all JSON):
 *   GET  /                                   what it answers
 *   POST /session  {user}                    the hosted pages' links for the user
 *   GET  /connect?user=  GET /billing?user=  302 to svc's hosted connect / billing page
 *   POST /ask      {user, prompt?, model?}   a run with the app's tools; the result
 *   GET  /usage?user=                        the user's plan view and ledger rows
 */
import http from "node:http";
import { Svc, ServeInAppError, type Handback, type RunEvent, type RunTool, type ServedInApp } from "@svc/sdk";

const baseUrl = withV1(process.env.SVC_BASE_URL ?? "http://127.0.0.1:4000/v1");
// SVC_API_KEY is what the SDK reads by itself; SVC_APP_KEY is taken too.
const apiKey = process.env.SVC_API_KEY ?? process.env.SVC_APP_KEY;
if (!apiKey) {
  console.error("Set SVC_API_KEY to the app key (sk_svc_...) that `npm start` printed.");
  process.exit(2);
}
const svc = new Svc({ apiKey, baseUrl });
const port = Number(process.env.APP_PORT ?? 3000);

/** The app's tools: svc's run calls them, the SDK runs them here, in the app. */
const tools: RunTool[] = [
  {
    name: "weather",
    description: "Today's weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    run: async (args) => ({ city: (args as { city?: string }).city ?? "?", tempC: 21, sky: "clear" }),
  },
  {
    name: "send_mail",
    description: "Sends an e-mail for the user.",
    parameters: { type: "object", properties: { to: { type: "string" }, body: { type: "string" } }, required: ["to"] },
    needsApproval: true,
    run: async (args) => `sent to ${(args as { to: string }).to}`,
  },
];

/**
 * Approvals: a real app asks its user (a button in its UI) and answers with
 * the decision; this example decides by a rule: mail within example.com only.
 */
function approve(req: { tool: string; arguments: unknown }) {
  const to = String((req.arguments as { to?: string })?.to ?? "");
  return to.endsWith("@example.com") ? true : { decision: "deny", reason: `${to || "that address"} is outside example.com` };
}

/** What a run does when the request names no prompt: a script for `svc/echo`, the service's own model. */
const DEFAULT_SCRIPT = JSON.stringify([
  { say: "Checking the weather. " },
  { call: "weather", arguments: { city: "Paris" } },
  { call: "send_mail", arguments: { to: "team@example.com", body: "Paris: clear" } },
  { say: "Done: {{result}}." },
]);

/**
 * The app's own model provider, for runs svc hands back (the user has nothing
 * reachable): a stand-in that answers locally. Swap in your provider's client;
 * the usage it returns is reported to svc by the SDK.
 */
async function standInProvider(h: Handback): Promise<ServedInApp> {
  const output = `[stand-in provider] ${h.prompt}`;
  return { output, usage: { inputTokens: words(h.prompt) + words(h.system ?? ""), outputTokens: words(output), model: "stand-in-1" } };
}

/**
 * Which model: the one asked for; else `auto` when one of the user's machines is
 * online with a runtime that can serve (supported, online, offering a model or an
 * agent CLI, its subscription not spent); else `svc/echo`, so the app works before
 * anyone has paired, and on a machine that is online but serves nothing.
 */
async function modelFor(user: string, asked: string | undefined): Promise<string> {
  if (asked) return asked;
  const compute = await svc.users.compute(user).catch(() => null);
  const now = Date.now();
  const canServe = compute?.machines.some(
    (m) =>
      m.state !== "offline" &&
      m.runtimes.some(
        (r) =>
          r.supported &&
          r.state !== "offline" &&
          (r.kind === "agent" || r.models.length > 0) &&
          !r.limits?.windows.some((w) => w.status === "rejected" && (!w.resetsAt || Date.parse(w.resetsAt) > now)),
      ),
  );
  return canServe ? "auto" : "svc/echo";
}

async function ask(body: { user?: string; prompt?: string; model?: string }) {
  if (!body.user) throw new HttpError(400, "user is required");
  const model = await modelFor(body.user, body.model);
  const prompt = body.prompt ?? (model === "svc/echo" ? DEFAULT_SCRIPT : "What is the weather in Paris? Mail it to team@example.com.");
  const run = svc.runs.create({ user: body.user, model, prompt, tools, onApproval: approve, serveInApp: standInProvider });
  const events: RunEvent["kind"][] = [];
  for await (const event of run) events.push(event.kind);
  const result = await run.result();
  return { ...result, model, events };
}

async function session(user: string) {
  const s = await svc.sessions.create({ user });
  // The hosted pages read the session from the URL's fragment.
  return { session: s.session, expiresIn: s.expires_in, connectUrl: s.url, billingUrl: s.billing_url };
}

async function usage(user: string) {
  const rows = [];
  for await (const row of svc.usage.list({ user })) rows.push(row);
  const view = await svc.users.retrieve(user).catch(() => null);
  return { user: view, rows };
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://app.local");
  const user = url.searchParams.get("user") ?? "";
  try {
    if (req.method === "GET" && url.pathname === "/") return send(res, 200, { endpoints: ["POST /session {user}", "GET /connect?user=", "GET /billing?user=", "POST /ask {user, prompt?, model?}", "GET /usage?user="] });
    if (req.method === "POST" && url.pathname === "/session") return send(res, 200, await session(String((await readJson(req)).user ?? "")));
    if (req.method === "GET" && (url.pathname === "/connect" || url.pathname === "/billing")) {
      const s = await session(user);
      res.writeHead(302, { location: url.pathname === "/connect" ? s.connectUrl : s.billingUrl }).end();
      return;
    }
    if (req.method === "POST" && url.pathname === "/ask") return send(res, 200, await ask(await readJson(req)));
    if (req.method === "GET" && url.pathname === "/usage") return send(res, 200, await usage(user));
    send(res, 404, { error: "not found" });
  } catch (err) {
    if (err instanceof HttpError) return send(res, err.status, { error: err.message });
    // svc's errors carry status, code and the request id to quote.
    const e = err as { status?: number; code?: string; requestId?: string; message: string };
    console.error("request failed:", e.message);
    send(res, e.status && e.status < 500 ? e.status : 502, { error: e.message, code: e.code, requestId: e.requestId, handback: err instanceof ServeInAppError });
  }
});
server.listen(port, "127.0.0.1", () => {
  const address = server.address() as { port: number };
  console.log(`example app listening on http://127.0.0.1:${address.port} (svc at ${baseUrl})`);
});
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => server.close(() => process.exit(0)));

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function send(res: http.ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

async function readJson(req: http.IncomingMessage): Promise<Record<string, string | undefined>> {
  let text = "";
  for await (const chunk of req) text += chunk;
  try {
    return text ? JSON.parse(text) : {};
  } catch {
    throw new HttpError(400, "the body is not JSON");
  }
}

function withV1(url: string): string {
  const trimmed = url.replace(/\/+$/, "");
  return trimmed.endsWith("/v1") ? trimmed : `${trimmed}/v1`;
}

function words(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}
