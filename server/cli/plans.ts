import fs from "node:fs";
import { Command, InvalidArgumentError } from "commander";
import { z } from "zod";
import { PlanInput, type Plan } from "@svc/contract";
import { CliError } from "./admin-client.js";

/**
 * `svc plans ...`: the app configures its plans through the HTTP API with its
 * own app key (the same rules and checks as `POST/PATCH/DELETE /v1/plans`), so
 * it works against any deployment. `svc plans apply <file>` makes the plans
 * match a JSON file: creates the missing ones, changes the others, and with
 * `--archive-missing` archives those the file no longer lists.
 */
type PlanView = z.infer<typeof Plan>;

const PlansFile = z.object({ plans: z.array(PlanInput).min(1) });

interface Api {
  call<T>(method: string, path: string, body?: unknown): Promise<T>;
}

function apiOf(opts: { apiKey?: string; baseUrl?: string }): Api {
  const key = opts.apiKey ?? process.env.SVC_API_KEY;
  const base = (opts.baseUrl ?? process.env.SVC_BASE_URL ?? "http://127.0.0.1:4000").replace(/\/+$/, "").replace(/\/v1$/, "");
  if (!key) throw new CliError("plans commands use the app key: pass --api-key sk_svc_... or set SVC_API_KEY.");
  return {
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      let res: Response;
      try {
        res = await fetch(`${base}${path}`, {
          method,
          headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
      } catch (err) {
        throw new CliError(`cannot reach ${base}: ${(err as Error).message} (set --base-url or SVC_BASE_URL)`);
      }
      const json = (await res.json().catch(() => null)) as { error?: { code: string; message: string } } | null;
      if (!res.ok) throw new CliError(`${res.status} ${json?.error?.code ?? ""}: ${json?.error?.message ?? "unexpected answer"}`);
      return json as T;
    },
  };
}

const money = (m: number, currency: string) => `${(m / 1_000_000).toFixed(2)} ${currency.toUpperCase()}`;
export const planLine = (p: PlanView) =>
  [
    p.slug.padEnd(14),
    `${money(p.priceMicros, p.currency)}/${p.period}`.padEnd(16),
    `${p.allowance.limit === null ? "unlimited" : p.allowance.limit} ${p.allowance.unit}`.padEnd(18),
    p.overage ? `overage${p.overagePriceMicros !== null ? ` ${p.overagePriceMicros}µ` : ""}` : "stops",
    p.spendCeilingMicros !== null ? ` ceiling ${p.spendCeilingMicros}µ` : "",
    p.trialDays ? ` trial ${p.trialDays}d` : "",
    p.isDefault ? " (default)" : "",
    p.archived ? " (archived)" : "",
  ].join("");

const int = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};
/** `unlimited` travels as -1 (commander keeps the raw string when a parser returns null). */
const UNLIMITED = -1;
const limitOf = (v: string) => (v === "unlimited" ? UNLIMITED : int(v));
const limit = (n: number) => (n === UNLIMITED ? null : n);

function print(json: boolean, value: unknown, text: string) {
  process.stdout.write(json ? `${JSON.stringify(value)}\n` : `${text}\n`);
}

export function registerPlanCommands(program: Command) {
  const plans = program
    .command("plans")
    .description("the app's plans, through the API with its app key (--api-key or SVC_API_KEY, --base-url or SVC_BASE_URL)")
    .option("--api-key <key>", "the app key (sk_svc_...) of the app and environment")
    .option("--base-url <url>", "the service's base URL");
  const api = () => apiOf(plans.opts());
  const planOptions = (cmd: Command) =>
    cmd
      .option("--name <name>", "shown on the pricing page")
      .option("--description <text>")
      .option("--price <micros>", "price per period in integer micros (9900000 = 9.90)", int)
      .option("--currency <code>", "ISO 4217, lowercase")
      .option("--period <period>", "month or year")
      .option("--runs <n>", "allowance counted in runs per period, or 'unlimited'", limitOf)
      .option("--tokens <n>", "allowance counted in tokens per period, or 'unlimited'", limitOf)
      .option("--overage", "usage goes on past the allowance as overage")
      .option("--stop", "the run that would pass the allowance gets 402 (the default)")
      .option("--overage-price <micros>", "each run past the allowance costs this", int)
      .option("--spend-ceiling <micros>", "stop runs once the user's spend this period reaches it", int)
      .option("--trial-days <n>", "free trial at checkout", int)
      .option("--stripe-price <id>", "the price in the app's connected Stripe account (price_...)")
      .option("--default", "users start on this plan")
      .option("--json", "print JSON");
  const bodyOf = (o: Record<string, unknown>) =>
    Object.fromEntries(
      Object.entries({
        name: o.name,
        description: o.description,
        priceMicros: o.price,
        currency: o.currency,
        period: o.period,
        allowance: o.runs !== undefined ? { unit: "runs", limit: limit(o.runs as number) } : o.tokens !== undefined ? { unit: "tokens", limit: limit(o.tokens as number) } : undefined,
        overage: o.overage ? true : o.stop ? false : undefined,
        overagePriceMicros: o.overagePrice,
        spendCeilingMicros: o.spendCeiling,
        trialDays: o.trialDays,
        stripePriceId: o.stripePrice,
        isDefault: o.default ? true : undefined,
      }).filter(([, v]) => v !== undefined),
    );

  plans
    .command("list")
    .description("the plans, archived ones too")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const { data } = await api().call<{ data: PlanView[] }>("GET", "/v1/plans?archived=true");
      print(Boolean(o.json), data, data.map(planLine).join("\n") || "(no plans)");
    });
  planOptions(plans.command("create").description("create a plan").argument("<slug>", "its id in URLs and files (lowercase)")).action(
    async (slug: string, o: Record<string, unknown>) => {
      const plan = await api().call<PlanView>("POST", "/v1/plans", { slug, ...bodyOf(o), name: o.name ?? slug });
      print(Boolean(o.json), plan, `created ${planLine(plan)}`);
    },
  );
  planOptions(plans.command("update").description("change the fields given").argument("<slug>")).action(async (slug: string, o: Record<string, unknown>) => {
    const plan = await api().call<PlanView>("PATCH", `/v1/plans/${encodeURIComponent(slug)}`, bodyOf(o));
    print(Boolean(o.json), plan, `updated ${planLine(plan)}`);
  });
  plans
    .command("archive")
    .description("stop selling a plan (its subscribers keep it)")
    .argument("<slug>")
    .option("--json", "print JSON")
    .action(async (slug: string, o: { json?: boolean }) => {
      const plan = await api().call<PlanView>("DELETE", `/v1/plans/${encodeURIComponent(slug)}`);
      print(Boolean(o.json), plan, `archived ${planLine(plan)}`);
    });
  plans
    .command("apply")
    .description('make the plans match a JSON file {"plans":[{slug, name, priceMicros, allowance:{unit, limit}, ...}]}')
    .argument("<file>")
    .option("--archive-missing", "archive live plans the file does not list")
    .option("--json", "print JSON")
    .action(async (file: string, o: { archiveMissing?: boolean; json?: boolean }) => {
      let parsed: z.infer<typeof PlansFile>;
      try {
        parsed = PlansFile.parse(JSON.parse(fs.readFileSync(file, "utf8")));
      } catch (err) {
        const detail = err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") : (err as Error).message;
        throw new CliError(`${file}: ${detail}`);
      }
      const a = api();
      const existing = new Map((await a.call<{ data: PlanView[] }>("GET", "/v1/plans?archived=true")).data.map((p) => [p.slug, p]));
      const done: { slug: string; action: string }[] = [];
      // The default last, so the file's default wins over one set along the way.
      for (const p of [...parsed.plans].sort((x, y) => Number(x.isDefault) - Number(y.isDefault))) {
        const { slug, ...rest } = p;
        if (existing.has(slug)) await a.call("PATCH", `/v1/plans/${encodeURIComponent(slug)}`, rest);
        else await a.call("POST", "/v1/plans", p);
        done.push({ slug, action: existing.has(slug) ? "updated" : "created" });
      }
      if (o.archiveMissing) {
        const listed = new Set(parsed.plans.map((p) => p.slug));
        for (const p of existing.values()) {
          if (listed.has(p.slug) || p.archived) continue;
          await a.call("DELETE", `/v1/plans/${encodeURIComponent(p.slug)}`);
          done.push({ slug: p.slug, action: "archived" });
        }
      }
      print(Boolean(o.json), done, done.map((d) => `${d.action.padEnd(9)} ${d.slug}`).join("\n"));
    });
}
