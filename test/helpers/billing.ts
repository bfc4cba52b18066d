import { expect } from "vitest";
import type { TestServer } from "./server.js";
import { bearer } from "./requests.js";
import { signedDelivery, STANDIN_CLIENT_ID, stripeEvent, type StripeStandIn } from "./stripe-standin.js";

/** What the billing suites configure: the platform's Stripe key, webhook secret and Connect client id, pointed at the stand-in's two hosts. */
export const WEBHOOK_SECRET = "whsec_billingtestsecret0123456789";
export const stripeEnv = (stripe: Pick<StripeStandIn, "url" | "connectUrl">) => ({
  STRIPE_SECRET_KEY: "sk_test_standin",
  STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
  STRIPE_API_URL: stripe.url,
  STRIPE_CONNECT_URL: stripe.connectUrl,
  STRIPE_CONNECT_CLIENT_ID: STANDIN_CLIENT_ID,
});

export const ACCOUNT = "acct_1AppConnected";

/**
 * The dev app's plans: `free` (the default, no runs at all), `pro` (sold at
 * price_pro, 100 runs, a 14-day trial), `team` (sold, no trial), `legacy`
 * (archived), `manual` (no Stripe price). Written as rows, as the app's
 * configuration would leave them.
 */
export async function writePlans(server: TestServer): Promise<void> {
  const tenant = { appId: server.dev.appId, environment: "test" as const };
  const at = (s: number) => new Date(server.clock.now().getTime() - 3600_000 + s * 1000);
  await server.db.prisma.plan.createMany({
    data: [
      { id: "plan_free", ...tenant, slug: "free", name: "Free", priceMicros: 0n, allowance: 0n, isDefault: true, createdAt: at(1) },
      { id: "plan_pro", ...tenant, slug: "pro", name: "Pro", priceMicros: 20_000_000n, allowance: 100n, trialDays: 14, stripePriceId: "price_pro", createdAt: at(2) },
      { id: "plan_team", ...tenant, slug: "team", name: "Team <b>&", priceMicros: 90_000_000n, allowance: 1000n, stripePriceId: "price_team", createdAt: at(3) },
      { id: "plan_legacy", ...tenant, slug: "legacy", name: "Legacy", priceMicros: 5_000_000n, allowance: 10n, stripePriceId: "price_legacy", archivedAt: at(4), createdAt: at(4) },
      { id: "plan_manual", ...tenant, slug: "manual", name: "Manual", priceMicros: 0n, allowance: 5n, createdAt: at(5) },
    ],
  });
}

export async function mintSession(server: TestServer, user: string): Promise<{ session: string; url: string }> {
  const res = await server.fetch("/v1/end_users/session", {
    method: "POST",
    headers: { ...bearer(server.dev.appKey), "content-type": "application/json" },
    body: JSON.stringify({ user }),
  });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { session: string; url: string };
}

export function startConnect(server: TestServer, body: unknown, appKey = server.dev.appKey): Promise<Response> {
  return server.fetch("/v1/billing/connect", { method: "POST", headers: { ...bearer(appKey), "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** Follows one redirect by hand, as a browser would (no credential, no cookies). */
export async function follow(res: Response): Promise<Response> {
  expect(res.status, await res.clone().text()).toBe(302);
  return fetch(res.headers.get("location")!, { redirect: "manual" });
}

/**
 * Connects `account` to an app through Stripe Connect OAuth, the way the app owner's browser does it: the app's
 * server starts the flow (POST /v1/billing/connect), the browser opens Stripe's authorization page, where the
 * account's owner is signed in and approves, and Stripe sends it back to the callback. Answers the callback's response
 * (200 JSON without a `returnUrl`).
 */
export async function connectAccount(
  server: TestServer,
  stripe: StripeStandIn,
  opts: { account?: string; appKey?: string; returnUrl?: string; answer?: "approve" | "deny" } = {},
): Promise<Response> {
  stripe.signIn(opts.account ?? ACCOUNT, opts.answer);
  const start = await startConnect(server, { mode: "oauth", ...(opts.returnUrl ? { returnUrl: opts.returnUrl } : {}) }, opts.appKey);
  expect(start.status, await start.clone().text()).toBe(200);
  const { url } = (await start.json()) as { url: string };
  return follow(await fetch(url, { redirect: "manual" }));
}

export function checkout(server: TestServer, session: string, body: unknown): Promise<Response> {
  return server.fetch("/v1/billing/checkout", { method: "POST", headers: { ...bearer(session), "content-type": "application/json" }, body: JSON.stringify(body) });
}

export function portal(server: TestServer, session: string, body: unknown = {}): Promise<Response> {
  return server.fetch("/v1/billing/portal", { method: "POST", headers: { ...bearer(session), "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** The service's clock in Stripe's Unix seconds. */
export const unixNow = (server: TestServer) => Math.floor(server.clock.now().getTime() / 1000);

/** Delivers a signed event as Stripe would (from the connected account unless `account: null`). */
export async function deliver(
  server: TestServer,
  type: string,
  object: Record<string, unknown>,
  opts: { created?: number; account?: string | null; id?: string; livemode?: boolean } = {},
): Promise<{ status: number; body: { received?: boolean; duplicate?: boolean; error?: { code: string } }; eventId: string }> {
  const event = stripeEvent(type, object, { created: opts.created ?? unixNow(server), account: opts.account === undefined ? ACCOUNT : opts.account, id: opts.id, livemode: opts.livemode });
  const { body, headers } = signedDelivery(event, WEBHOOK_SECRET, unixNow(server));
  const res = await server.fetch("/v1/stripe/webhook", { method: "POST", headers, body });
  return { status: res.status, body: (await res.json()) as never, eventId: event.id };
}

/** Starts a run for `user` that may only be handed back: 402 while the allowance is used up, 409 serve_in_app (counted) otherwise. */
export async function startHandback(server: TestServer, user: string): Promise<{ status: number; code: string | undefined }> {
  const res = await server.fetch("/v1/runs", {
    method: "POST",
    headers: { ...bearer(server.dev.appKey), "content-type": "application/json" },
    body: JSON.stringify({ user, prompt: "hello", route: { prefer: ["app"] } }),
  });
  const text = await res.text();
  const code = res.headers.get("content-type")?.startsWith("application/json") ? (JSON.parse(text) as { error?: { code: string } }).error?.code : undefined;
  return { status: res.status, code };
}

export async function getUser(server: TestServer, user: string) {
  const res = await server.fetch(`/v1/users/${encodeURIComponent(user)}`, { headers: bearer(server.dev.appKey) });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { plan: { slug: string } | null; subscription: { status: string; source: string; trialEndsAt: string | null } | null; allowance: { limit: number | null; used: number } };
}
