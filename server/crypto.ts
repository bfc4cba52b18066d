import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** URL-safe random string with `bytes` bytes of entropy. */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}

/**
 * Random bytes for ids, drawn from a pool filled 4 KiB at a time (as `crypto.randomUUID` does):
 * a call to the system's generator per id was a measurable part of a request's CPU here.
 */
const POOL_BYTES = 4096;
let pool = randomBytes(POOL_BYTES);
let used = 0;

/** Lowercase alphanumeric id (no ambiguous separators), for key ids and row ids. */
export function randomId(prefix = "", length = 20): string {
  const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz";
  if (used + length > POOL_BYTES) {
    pool = randomBytes(POOL_BYTES);
    used = 0;
  }
  let out = prefix;
  for (let i = used; i < used + length; i++) out += alphabet[pool[i] % 36];
  used += length;
  return out;
}

/**
 * SHA-256 of a secret, hex. Secrets here are random with at least 128 bits of
 * entropy, so a fast hash is the right tool (a password KDF adds nothing).
 */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

/** Constant-time check of a presented secret against a stored hash. */
export function secretMatches(secret: string, storedHash: string): boolean {
  const a = Buffer.from(hashSecret(secret), "hex");
  const b = Buffer.from(storedHash, "hex");
  return a.length === b.length && timingSafeEqual(a, b);
}
