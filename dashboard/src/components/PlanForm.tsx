import { useState, type FormEvent } from "react";
import type { z } from "zod";
import type { Plan, PlanInput } from "@svc/contract";
import { decimalToMicros, microsToDecimal } from "../format/money";
import { Field } from "./Field";

type PlanValue = z.infer<typeof Plan>;
export type PlanFields = z.input<typeof PlanInput>;

const optionalMicros = (text: string) => (text.trim() === "" ? null : decimalToMicros(text));

/** Create a plan (no `plan`), or edit one (its slug stays). Prices are typed as decimals and sent as integer micros. */
export function PlanForm({ plan, onSubmit, pending, submitLabel }: { plan?: PlanValue; onSubmit: (fields: PlanFields) => void; pending: boolean; submitLabel: string }) {
  const [problem, setProblem] = useState<string | null>(null);
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const text = (name: string) => String(f.get(name) ?? "");
    const price = decimalToMicros(text("price"));
    const overagePrice = optionalMicros(text("overagePrice"));
    const ceiling = optionalMicros(text("ceiling"));
    if (price === null || (text("overagePrice").trim() && overagePrice === null) || (text("ceiling").trim() && ceiling === null)) {
      setProblem("Amounts are decimals with at most 6 digits after the point, like 9.99.");
      return;
    }
    setProblem(null);
    const limit = text("limit").trim();
    onSubmit({
      slug: plan?.slug ?? text("slug"),
      name: text("name"),
      description: text("description") || null,
      priceMicros: price,
      currency: text("currency").toLowerCase(),
      period: text("period") as "month" | "year",
      allowance: { unit: text("unit") as "runs" | "tokens", limit: limit === "" ? null : Number(limit) },
      overage: f.get("overage") === "on",
      overagePriceMicros: overagePrice,
      spendCeilingMicros: ceiling,
      trialDays: Number(text("trialDays") || 0),
      stripePriceId: text("stripePriceId").trim() || null,
    });
  };
  const id = plan?.slug ?? "new";
  return (
    <form onSubmit={submit} className="plan-form" aria-label={plan ? `Edit plan ${plan.name}` : "New plan"}>
      {!plan && <Field label="Slug" name="slug" required pattern="[a-z0-9][a-z0-9_\-]*" hint="Lowercase letters, digits, - and _; it cannot change." />}
      <Field label="Name" name="name" required defaultValue={plan?.name} />
      <Field label="Description" name="description" defaultValue={plan?.description ?? ""} />
      <Field label="Price per period" name="price" inputMode="decimal" required defaultValue={plan ? microsToDecimal(plan.priceMicros) : "0"} />
      <Field label="Currency" name="currency" required pattern="[A-Za-z]{3}" defaultValue={plan?.currency ?? "usd"} hint="ISO 4217 code, like usd or eur." />
      <div className="field">
        <label htmlFor={`period-${id}`}>Period</label>
        <select id={`period-${id}`} name="period" defaultValue={plan?.period ?? "month"}>
          <option value="month">Month</option>
          <option value="year">Year</option>
        </select>
      </div>
      <div className="field">
        <label htmlFor={`unit-${id}`}>Allowance unit</label>
        <select id={`unit-${id}`} name="unit" defaultValue={plan?.allowance.unit ?? "runs"}>
          <option value="runs">Runs</option>
          <option value="tokens">Tokens</option>
        </select>
      </div>
      <Field label="Allowance per period" name="limit" type="number" min={0} defaultValue={plan?.allowance.limit ?? ""} hint="Empty: unlimited." />
      <div className="field field-check">
        <input id={`overage-${id}`} name="overage" type="checkbox" defaultChecked={plan?.overage ?? false} />
        <label htmlFor={`overage-${id}`}>Allow overage past the allowance</label>
      </div>
      <Field label="Overage price per unit" name="overagePrice" inputMode="decimal" defaultValue={plan?.overagePriceMicros != null ? microsToDecimal(plan.overagePriceMicros) : ""} hint="Per run, or per 1,000 tokens." />
      <Field label="Spend ceiling per period" name="ceiling" inputMode="decimal" defaultValue={plan?.spendCeilingMicros != null ? microsToDecimal(plan.spendCeilingMicros) : ""} hint="Empty: none." />
      <Field label="Trial days" name="trialDays" type="number" min={0} max={730} defaultValue={plan?.trialDays ?? 0} />
      <Field label="Stripe price id" name="stripePriceId" defaultValue={plan?.stripePriceId ?? ""} hint="price_…: needed to sell it through checkout." />
      {problem && (
        <p role="alert" className="notice notice-error">
          {problem}
        </p>
      )}
      <button type="submit" className="primary" disabled={pending}>
        {submitLabel}
      </button>
    </form>
  );
}
