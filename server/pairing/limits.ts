import type { Bucket, Limit } from "../rate-limit/rate-limiter.js";
import type { Tenant } from "../keys/keys.js";

/**
 * Pairing's rate limits (README "Pairing"). A user code has 20^8 (2.6e10)
 * values, so even the app-wide budget of wrong guesses leaves an attacker a
 * chance per window of about (pending codes) x 1e-7.
 */
export const PAIRING_LIMITS = {
  /** Wrong user codes one session may enter: a person mistyping, never a search. */
  guessesPerSession: { max: 10, windowSeconds: 600 },
  /** Wrong user codes from one client address, whatever the session (sessions are cheap for an app's user). */
  guessesPerAddress: { max: 30, windowSeconds: 600 },
  /** Wrong user codes across one app and environment: bounds a distributed search. */
  guessesPerApp: { max: 1000, windowSeconds: 600 },
  /** Device codes created with one connect key (it is public: anyone can call with it). */
  codesPerConnectKey: { max: 300, windowSeconds: 60 },
  /** Device codes created from one client address. */
  codesPerAddress: { max: 20, windowSeconds: 600 },
} satisfies Record<string, Limit>;

export function guessBuckets(sessionId: string, tenant: Tenant, address: string): Bucket[] {
  const what = "wrong codes";
  return [
    { key: `guess:session:${sessionId}`, limit: PAIRING_LIMITS.guessesPerSession, what: `${what} in this session` },
    { key: `guess:addr:${address}`, limit: PAIRING_LIMITS.guessesPerAddress, what: `${what} from this address` },
    { key: `guess:app:${tenant.appId}:${tenant.environment}`, limit: PAIRING_LIMITS.guessesPerApp, what: `${what} for this app` },
  ];
}

export function deviceCodeBuckets(connectKey: string, address: string): Bucket[] {
  return [
    { key: `code:pk:${connectKey}`, limit: PAIRING_LIMITS.codesPerConnectKey, what: "pairing requests with this connect key" },
    { key: `code:addr:${address}`, limit: PAIRING_LIMITS.codesPerAddress, what: "pairing requests from this address" },
  ];
}
