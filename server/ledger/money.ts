/**
 * Money and counts leave the database as BIGINT (a string from node-postgres, a
 * number or a BigInt from PGlite, numeric for SUM) and reach JSON as integers.
 * Beyond 2^53 a JSON number would round: that is refused, never rounded.
 */
export function micros(value: string | number | bigint | null | undefined): number {
  if (value === null || value === undefined) return 0;
  const big = typeof value === "bigint" ? value : BigInt(typeof value === "number" ? Math.trunc(value) : value.split(".")[0]);
  if (big > BigInt(Number.MAX_SAFE_INTEGER) || big < -BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`amount ${big} exceeds what JSON carries exactly`);
  return Number(big);
}
