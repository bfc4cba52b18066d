import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** URL-safe random string with `bytes` bytes of entropy. */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}

/** Lowercase alphanumeric id (no ambiguous separators), for key ids and row ids. */
export function randomId(prefix = "", length = 20): string {
  const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz";
  const bytes = randomBytes(length);
  let out = "";
  for (const b of bytes) out += alphabet[b % 36];
  return prefix + out;
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
