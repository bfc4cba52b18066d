/**
 * svc web components: one ES module, no framework, no build step.
 *
 *   <script type="module" src="https://<svc>/components/svc-components.js"></script>
 *   <svc-plans session="est_..."></svc-plans>
 *   <svc-checkout session="est_..." plan="pro">Upgrade to Pro</svc-checkout>
 *   <svc-compute-status session="est_..."></svc-compute-status>
 *
 * Attributes (all three):
 *   session    the end user's session token (`est_...`), minted by the app's server
 *              (POST /v1/end_users/session); it acts for that one user for ten minutes
 *   base-url   the service's base URL; default: the origin this script was loaded from
 * <svc-plans> and <svc-checkout> also take `return-url`: where Stripe sends the
 * browser back (default: the hosted billing page).
 *
 * A user with a live Stripe subscription gets "Manage subscription" in <svc-plans>,
 * and Choose on another plan, both opening Stripe's customer portal (plan changes,
 * the card, invoices, cancelling) instead of a second checkout.
 *
 * Events (bubbling, composed):
 *   svc-plan-selected  {plan, portal}  from <svc-plans> when Choose is clicked (`portal`:
 *                              true when it opens the customer portal); cancelable:
 *                              preventDefault() and the component starts no checkout
 *   svc-error          {status, code, message}  when a request fails
 *
 * Theming: CSS custom properties, set on the element or any ancestor.
 *   --svc-font        font family                   (system-ui)
 *   --svc-fg          text                          (#1b1d21)
 *   --svc-muted       secondary text                (#5d6470)
 *   --svc-bg          the component's background    (transparent)
 *   --svc-card        a plan's or machine's card    (#ffffff)
 *   --svc-border      borders                       (#d9dde3)
 *   --svc-accent      buttons, the current plan     (#2456d3)
 *   --svc-accent-fg   text on the accent            (#ffffff)
 *   --svc-danger      errors                        (#b42318)
 *   --svc-ok          an online machine             (#137333)
 *   --svc-radius      corner radius                 (10px)
 *
 * Everything shown comes from the service as text (never parsed as HTML).
 */

const SCRIPT_ORIGIN = new URL(import.meta.url).origin;
const REFRESH_MS = 10_000;

const CSS = `
:host { display: block; font-family: var(--svc-font, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif); color: var(--svc-fg, #1b1d21);
  background: var(--svc-bg, transparent); line-height: 1.45; }
:host([hidden]) { display: none; }
* { box-sizing: border-box; }
.list { display: grid; gap: .75rem; grid-template-columns: repeat(auto-fill, minmax(13rem, 1fr)); margin: 0; padding: 0; list-style: none; }
.card { background: var(--svc-card, #fff); border: 1px solid var(--svc-border, #d9dde3); border-radius: var(--svc-radius, 10px); padding: 1rem; display: flex; flex-direction: column; gap: .35rem; }
.card.current { border-color: var(--svc-accent, #2456d3); box-shadow: 0 0 0 1px var(--svc-accent, #2456d3); }
.name { font-weight: 700; font-size: 1.05rem; margin: 0; }
.price { font-size: 1.3rem; font-weight: 700; margin: 0; }
.period, .muted, .meta { color: var(--svc-muted, #5d6470); font-size: .9rem; margin: 0; }
.badge { align-self: flex-start; font-size: .75rem; font-weight: 700; text-transform: uppercase; letter-spacing: .04em; color: var(--svc-accent, #2456d3); }
button { font: inherit; font-weight: 600; margin-top: auto; padding: .5rem 1rem; border-radius: calc(var(--svc-radius, 10px) * .6); cursor: pointer;
  border: 1px solid var(--svc-accent, #2456d3); background: var(--svc-accent, #2456d3); color: var(--svc-accent-fg, #fff); }
button:disabled { opacity: .6; cursor: progress; }
.error { color: var(--svc-danger, #b42318); margin: .5rem 0 0; }
.state { font-size: .8rem; font-weight: 700; }
.state.online, .state.busy { color: var(--svc-ok, #137333); }
.state.offline { color: var(--svc-muted, #5d6470); }
.row { display: flex; justify-content: space-between; gap: .5rem; align-items: baseline; }
.row.manage { align-items: center; margin-top: .75rem; }
.standing { margin-top: .75rem; display: grid; gap: .3rem; }
.meter { height: .4rem; border-radius: .2rem; background: var(--svc-border, #d9dde3); overflow: hidden; }
.meter .bar { display: block; height: 100%; background: var(--svc-accent, #2456d3); }
.meter.full .bar { background: var(--svc-danger, #b42318); }
.paused { border: 1px solid var(--svc-danger, #b42318); border-radius: var(--svc-radius, 10px); padding: .75rem 1rem; margin-bottom: .75rem; }
.paused-title { font-weight: 700; margin: 0 0 .2rem; }
`;

let sheet = null;
function styles(root) {
  if ("adoptedStyleSheets" in root && typeof CSSStyleSheet === "function" && "replaceSync" in CSSStyleSheet.prototype) {
    // A constructed sheet: no inline <style>, so a page's strict style-src still applies it.
    if (!sheet) (sheet = new CSSStyleSheet()).replaceSync(CSS);
    root.adoptedStyleSheets = [sheet];
  } else {
    root.append(h("style", {}, CSS));
  }
}

/** An element with attributes and children; strings become text nodes, never HTML. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

class ServiceError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `The service answered ${status}.`);
    this.status = status;
    this.code = body?.error?.code ?? null;
  }
}

/** What the three components share: the session, the service's address, requests and errors. */
class SvcElement extends HTMLElement {
  static observedAttributes = ["session", "base-url"];

  constructor() {
    super();
    styles(this.attachShadow({ mode: "open" }));
  }

  get session() {
    return this.getAttribute("session") ?? "";
  }

  get baseUrl() {
    return (this.getAttribute("base-url") || SCRIPT_ORIGIN).replace(/\/+$/, "");
  }

  connectedCallback() {
    this.ready = true;
    this.load();
  }

  disconnectedCallback() {
    this.ready = false;
    this.poll(false);
  }

  /** Reads again every 10 s while `on` (the machines' states; a run waiting on the user's plan), quietly. */
  poll(on) {
    if (on && !this.timer) this.timer = setInterval(() => this.ready && this.load(true), REFRESH_MS);
    if (!on && this.timer) this.timer = void clearInterval(this.timer);
  }

  attributeChangedCallback(_name, before, after) {
    // Attributes present at upgrade arrive before connectedCallback, which loads once for all of them.
    if (this.ready && before !== after) this.load();
  }

  /** A token for one load: a later load (a new session, a refresh) makes an earlier one's answer stale. */
  begin() {
    this.loads = (this.loads ?? 0) + 1;
    const mine = this.loads;
    return () => mine === this.loads;
  }

  /** Renders `nodes` as the component's whole content. */
  show(...nodes) {
    const root = this.shadowRoot;
    for (const n of [...root.childNodes]) if (n.nodeName !== "STYLE") n.remove();
    root.append(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
  }

  async api(method, path, body) {
    if (!this.session) throw new ServiceError(401, { error: { code: "missing_credential", message: "No session: the app must set the `session` attribute." } });
    const res = await fetch(`${this.baseUrl}/v1${path}`, {
      method,
      mode: "cors",
      credentials: "omit",
      cache: "no-store",
      headers: { authorization: `Bearer ${this.session}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = await res.json().catch(() => null);
    if (!res.ok) throw new ServiceError(res.status, data);
    return data;
  }

  /** The envelope's message, announced as an event too; a dead session says how to get a new one. */
  failure(err) {
    const status = err.status ?? 0;
    this.dispatchEvent(new CustomEvent("svc-error", { bubbles: true, composed: true, detail: { status, code: err.code ?? null, message: err.message } }));
    const text = status === 401 ? `${err.message} Reload this page from the app to continue.` : status === 0 ? "The service could not be reached. Try again." : err.message;
    return h("p", { class: "error", role: "alert", part: "error" }, text);
  }

  /** Starts checkout of `plan` and sends the browser to Stripe. */
  checkout(plan, button, errorSlot) {
    return this.toStripe("/billing/checkout", { plan }, button, errorSlot);
  }

  /** Opens Stripe's customer portal for the user's subscription. */
  portal(button, errorSlot) {
    return this.toStripe("/billing/portal", {}, button, errorSlot);
  }

  /** POSTs `path` and sends the browser to the `url` it answers; an error shows in `errorSlot`. */
  async toStripe(path, body, button, errorSlot) {
    button.disabled = true;
    errorSlot.replaceChildren();
    try {
      const returnUrl = this.getAttribute("return-url");
      const session = await this.api("POST", path, { ...body, ...(returnUrl ? { returnUrl } : {}) });
      window.location.assign(session.url);
    } catch (err) {
      errorSlot.append(this.failure(err));
      button.disabled = false;
    }
  }
}

/** A price (0 is "Free"), or with `amount` an amount spent (0 is "$0.00"). */
function money(micros, currency, amount = false) {
  if (micros === 0 && !amount) return "Free";
  try {
    return new Intl.NumberFormat(undefined, { style: "currency", currency: currency.toUpperCase() }).format(micros / 1_000_000);
  } catch {
    return `${(micros / 1_000_000).toFixed(2)} ${currency.toUpperCase()}`;
  }
}

function allowanceText(plan) {
  const { unit, limit } = plan.allowance;
  const per = `per ${plan.period}`;
  if (limit === null) return `Unlimited ${unit} ${per}`;
  return `${limit.toLocaleString()} ${limit === 1 ? unit.replace(/s$/, "") : unit} ${per}`;
}

function day(iso) {
  return new Intl.DateTimeFormat(undefined, { day: "numeric", month: "long", timeZone: "UTC" }).format(new Date(iso));
}

/** A bar of `used` out of `of` (capped at full), labelled for assistive technology. */
function meter(used, of, label) {
  const pct = of > 0 ? Math.min(100, Math.round((used / of) * 100)) : 100;
  const bar = h("span", { class: "bar" });
  bar.style.width = `${pct}%`;
  return h("div", { class: pct >= 100 ? "meter full" : "meter", role: "meter", "aria-label": label, "aria-valuemin": "0", "aria-valuemax": String(of), "aria-valuenow": String(Math.min(used, of)), part: "meter" }, bar);
}

/**
 * Where the user stands against their plan this window: what is used and left, spend
 * against the plan's ceiling, and when it resets ("8 of 10 runs used · 2 left · resets on 1 December").
 */
function standing(a, currency) {
  const unit = (n) => (n === 1 ? a.unit.replace(/s$/, "") : a.unit);
  const used = a.limit === null ? `${a.used.toLocaleString()} ${unit(a.used)} used` : `${a.used.toLocaleString()} of ${a.limit.toLocaleString()} ${a.unit} used`;
  const left = a.remaining === null ? null : a.remaining === 0 ? "none left" : `${a.remaining.toLocaleString()} left`;
  const lines = [h("p", { class: "meta usage" }, [used, left, `resets on ${day(a.resetsAt)}`].filter(Boolean).join(" · "))];
  if (a.limit !== null) lines.push(meter(a.used, a.limit, `${a.unit} used this period`));
  const s = a.spend;
  if (s.ceilingMicros !== null) {
    lines.push(h("p", { class: "meta spend" }, `${money(s.usedMicros, currency, true)} of ${money(s.ceilingMicros, currency, true)} spend limit used${s.reached ? " · limit reached" : ""}`));
    lines.push(meter(s.usedMicros, s.ceilingMicros, "spend this period"));
  }
  return h("div", { class: "standing", part: "standing" }, lines);
}

/** Runs paused at the plan's limit: say so, and that an upgrade resumes them where they stopped. */
function pausedNotice(paused, canBuy) {
  const forPlan = paused.filter((p) => p.limit !== "run_budget");
  if (forPlan.length === 0) return null;
  const what = forPlan[0].limit === "spend_ceiling" ? "your plan's spend limit is reached" : "your plan's allowance is used up";
  const runs = forPlan.length === 1 ? "A run is paused" : `${forPlan.length} runs are paused`;
  const next = canBuy ? "Choose a larger plan below: it resumes where it stopped." : "It resumes where it stopped once your plan changes.";
  return h(
    "div",
    { class: "paused", role: "status", part: "paused", "data-runs": forPlan.map((p) => p.runId).join(" ") },
    h("p", { class: "paused-title" }, `${runs}: ${what}.`),
    h("p", { class: "meta" }, `${next} Waiting until ${day(forPlan[0].expiresAt)}.`),
  );
}

/** A Stripe subscription the user holds (live, or with a failed payment to fix): it is changed in the customer portal, not by a second checkout. */
function stripeSubscribed(overview) {
  return overview.portalAvailable === true;
}

/**
 * The plans on sale, the user's current one marked, a Choose button on each
 * plan they can buy; with a Stripe subscription, Manage subscription and the
 * Choose buttons open the customer portal.
 */
class SvcPlans extends SvcElement {
  static observedAttributes = ["session", "base-url"];

  async load(quiet = false) {
    const current$ = this.begin();
    if (!quiet) this.show(h("p", { class: "muted" }, "Loading plans…"));
    let overview;
    try {
      overview = await this.api("GET", "/billing");
    } catch (err) {
      if (err.status === 401) this.poll(false);
      return current$() && this.show(this.failure(err));
    }
    if (!current$()) return;
    const current = overview.current.plan?.slug ?? null;
    const subscribed = stripeSubscribed(overview);
    const errorSlot = h("div", { class: "errors" });
    const cards = overview.plans.map((plan) => {
      const isCurrent = plan.slug === current;
      const buyable = overview.checkoutAvailable && plan.stripePriceId !== null && !plan.archived && !isCurrent;
      const button = buyable ? h("button", { type: "button", "data-plan": plan.slug, part: "button" }, "Choose") : null;
      button?.addEventListener("click", () => {
        const chosen = new CustomEvent("svc-plan-selected", { bubbles: true, composed: true, cancelable: true, detail: { plan: plan.slug, portal: subscribed } });
        if (!this.dispatchEvent(chosen)) return;
        if (subscribed) this.portal(button, errorSlot);
        else this.checkout(plan.slug, button, errorSlot);
      });
      return h(
        "li",
        { class: isCurrent ? "card current" : "card", "data-plan": plan.slug, "aria-current": isCurrent ? "true" : null, part: "plan" },
        isCurrent ? h("span", { class: "badge" }, "Current plan") : null,
        h("p", { class: "name" }, plan.name),
        h("p", { class: "price" }, money(plan.priceMicros, plan.currency), plan.priceMicros ? h("span", { class: "period" }, ` / ${plan.period}`) : null),
        h("p", { class: "meta allowance" }, allowanceText(plan)),
        plan.trialDays > 0 ? h("p", { class: "meta trial" }, `${plan.trialDays}-day free trial`) : null,
        plan.description ? h("p", { class: "muted" }, plan.description) : null,
        // A paid plan the app sells some other way: say so rather than show a card nobody can buy.
        overview.checkoutAvailable && plan.stripePriceId === null && plan.priceMicros > 0 && !plan.archived && !isCurrent
          ? h("p", { class: "muted not-sold" }, "Not sold through checkout: this plan has no Stripe price. Ask the app how to get it.")
          : null,
        button,
      );
    });
    const currency = overview.current.plan?.currency ?? "usd";
    const paused = overview.pausedRuns ?? [];
    // A run paused at the plan's limit resumes by itself once the plan changes: look again until it has.
    this.poll(paused.some((p) => p.limit !== "run_budget"));
    let manage = null;
    if (subscribed && overview.checkoutAvailable) {
      const button = h("button", { type: "button", class: "manage", part: "button manage" }, "Manage subscription");
      button.addEventListener("click", () => this.portal(button, errorSlot));
      manage = h("div", { class: "row manage" }, h("p", { class: "meta" }, "Change plan, payment method or cancel in the customer portal."), button);
    }
    this.show(
      pausedNotice(paused, overview.checkoutAvailable),
      h("ul", { class: "list", part: "plans" }, cards),
      manage,
      standing(overview.current.allowance, currency),
      overview.checkoutAvailable
        ? null
        : h("p", { class: "muted unavailable", "data-reason": overview.checkoutUnavailableReason ?? "" }, overview.checkoutUnavailableMessage ?? "Checkout is not available yet."),
      errorSlot,
    );
  }
}

/** One button that starts checkout of its `plan`. Its label is the element's content (default: Subscribe). */
class SvcCheckout extends SvcElement {
  static observedAttributes = ["session", "base-url", "plan"];

  load() {
    const errorSlot = h("div", { class: "errors" });
    const button = h("button", { type: "button", part: "button" }, h("slot", {}, "Subscribe"));
    button.addEventListener("click", () => {
      const plan = this.getAttribute("plan");
      if (!plan) return void errorSlot.replaceChildren(this.failure(new ServiceError(400, { error: { message: "No plan: set the `plan` attribute." } })));
      this.checkout(plan, button, errorSlot);
    });
    this.show(button, errorSlot);
  }
}

/** The user's machines, online or not, with their runtimes; refreshed every 10 s. */
class SvcComputeStatus extends SvcElement {
  async load(quiet = false) {
    const current$ = this.begin();
    this.poll(true);
    if (!quiet) this.show(h("p", { class: "muted" }, "Loading machines…"));
    let machines;
    try {
      machines = (await this.api("GET", "/machines")).data;
    } catch (err) {
      if (err.status === 401) this.poll(false);
      return current$() && this.show(this.failure(err));
    }
    if (!current$()) return;
    if (machines.length === 0) return this.show(h("p", { class: "muted empty" }, "No machines connected yet."));
    this.show(
      h(
        "ul",
        { class: "list", part: "machines" },
        machines.map((m) =>
          h(
            "li",
            { class: "card machine", "data-machine-id": m.id, part: "machine" },
            h("div", { class: "row" }, h("strong", { class: "hostname" }, m.hostname), h("span", { class: `state ${m.state}` }, m.state)),
            h("p", { class: "meta" }, `${m.platform} ${m.arch}`),
            h("p", { class: "meta runtimes" }, m.runtimes.length ? m.runtimes.map((r) => `${r.name} (${r.models.length} model${r.models.length === 1 ? "" : "s"})`).join(", ") : "No runtimes found"),
          ),
        ),
      ),
    );
  }
}

for (const [name, element] of [["svc-plans", SvcPlans], ["svc-checkout", SvcCheckout], ["svc-compute-status", SvcComputeStatus]]) {
  if (!customElements.get(name)) customElements.define(name, element);
}
