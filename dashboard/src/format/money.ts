const digitsCache = new Map<string, number>();

/** The currency's usual number of decimals (2 for USD, 0 for JPY). */
function minorDigits(currency: string): number {
  let digits = digitsCache.get(currency);
  if (digits === undefined) {
    try {
      digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits ?? 2;
    } catch {
      digits = 2;
    }
    digitsCache.set(currency, digits);
  }
  return digits;
}

/** Integer micros as an exact decimal string: 1234567 → "1.234567" (no float on the way). */
export function microsToDecimal(micros: number): string {
  const negative = micros < 0;
  const digits = String(Math.abs(micros)).padStart(7, "0");
  const whole = digits.slice(0, -6);
  const fraction = digits.slice(-6).replace(/0+$/, "");
  return `${negative ? "-" : ""}${whole}${fraction ? `.${fraction}` : ""}`;
}

/**
 * An amount in integer micros in its currency: `formatMoney(1_500_000, "usd")` is "$1.50".
 * Amounts finer than the currency's cents keep their digits ("$0.0025"), so small per-run costs do not show as $0.00.
 */
export function formatMoney(micros: number, currency: string): string {
  const code = currency.toUpperCase();
  const decimal = microsToDecimal(micros);
  const needed = decimal.includes(".") ? decimal.split(".")[1].length : 0;
  const usual = minorDigits(code);
  try {
    const format = new Intl.NumberFormat(undefined, { style: "currency", currency: code, minimumFractionDigits: usual, maximumFractionDigits: Math.max(usual, needed) });
    // A numeric string is formatted exactly (Intl.NumberFormat v3), never through a float.
    return format.format(decimal as unknown as number);
  } catch {
    return `${decimal} ${code}`;
  }
}

/** A decimal amount typed by a person ("12.5") as integer micros, or null when it is not one. */
export function decimalToMicros(text: string): number | null {
  const match = /^\s*(\d{1,12})(?:[.,](\d{0,6}))?\s*$/.exec(text);
  if (!match) return null;
  return Number(match[1]) * 1_000_000 + Number((match[2] ?? "").padEnd(6, "0"));
}
