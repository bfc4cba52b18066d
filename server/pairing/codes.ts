import { randomBytes } from "node:crypto";
import { PAIRING_TOKEN_PREFIX, USER_CODE_ALPHABET } from "@svc/contract";
import { randomToken } from "../crypto.js";

const USER_CODE_LENGTH = 8;

/**
 * A user code as RFC 8628 section 6.1 recommends: 8 characters of 20 consonants
 * (no vowels, so no words; no look-alike digits), about 34.6 bits. Drawn without
 * modulo bias by rejection sampling.
 */
export function newUserCode(): string {
  let out = "";
  while (out.length < USER_CODE_LENGTH) {
    for (const b of randomBytes(16)) {
      // 240 = 12 * 20: bytes at or above it would favour the first letters.
      if (b < 240 && out.length < USER_CODE_LENGTH) out += USER_CODE_ALPHABET[b % USER_CODE_ALPHABET.length];
    }
  }
  return out;
}

/** `BCDFGHJK` as the user sees it: `BCDF-GHJK`. */
export function displayUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/**
 * What the user typed, as stored: case, dashes and spaces do not matter. Null when
 * it cannot be a user code at all (wrong length or a letter outside the alphabet).
 */
export function normalizeUserCode(typed: string): string | null {
  const code = typed.toUpperCase().replace(/[\s-]/g, "");
  if (code.length !== USER_CODE_LENGTH) return null;
  for (const ch of code) if (!USER_CODE_ALPHABET.includes(ch)) return null;
  return code;
}

/** The device code: the machine's secret for its polls (256 bits). */
export function newDeviceCode(): string {
  return `dc_${randomToken(32)}`;
}

/** The pairing token: the machine's credential for its connection (256 bits). */
export function newPairingToken(): string {
  return `${PAIRING_TOKEN_PREFIX}${randomToken(32)}`;
}
