import type { Bucket, Limit } from "../rate-limit/rate-limiter.js";
import type { Tenant } from "../keys/keys.js";
import type { PairingLimitsConfig } from "../config.js";

/**
 * Pairing's rate limits (docs/app/pairing.md, "Rate limits"; docs/operators/security.md). A user code has 20^8 (2.6e10)
 * values, so even the app-wide budget of wrong guesses leaves an attacker a
 * chance per window of about (pending codes) x 1e-7. Guessing is limited per
 * session and app as tightly as ever; what one client address may do is only a
 * safety net, sized for a large NAT (an office, a school, a carrier-grade NAT:
 * hundreds of honest people behind one address), since the address says little
 * about who is calling.
 */
export interface GuessLimits {
  /** Wrong user codes one session may enter: a person mistyping, never a search. */
  perSession: Limit;
  /** Wrong user codes from one client address, whatever the session (sessions are cheap for an app's user): a NAT's worth of mistyping. */
  perAddress: Limit;
  /** Wrong user codes across one app and environment: bounds a distributed search. */
  perApp: Limit;
}

/** The defaults of `PAIRING_GUESSES_PER_SESSION`, `_PER_ADDRESS` and `_PER_APP`, each in 10 minutes. */
export const DEFAULT_GUESS_LIMITS: GuessLimits = {
  perSession: { max: 10, windowSeconds: 600 },
  perAddress: { max: 300, windowSeconds: 600 },
  perApp: { max: 1000, windowSeconds: 600 },
};

/** Device codes: per client address (a safety net against one host creating codes without end) and per connect key (public: anyone can call with it). */
export interface CodeLimits {
  perAddress: Limit;
  perConnectKey: Limit;
}

/**
 * The defaults of `PAIRING_CODES_PER_ADDRESS` (an hour) and `PAIRING_CODES_PER_CONNECT_KEY`
 * (a minute): 1,000 an hour from one address holds a school's morning of pairings;
 * 3,000 a minute per key lets an app pair 10,000 users' machines in under 4 minutes.
 */
export const DEFAULT_CODE_LIMITS: CodeLimits = {
  perAddress: { max: 1000, windowSeconds: 3600 },
  perConnectKey: { max: 3000, windowSeconds: 60 },
};

export function guessBuckets(sessionId: string, tenant: Tenant, address: string, limits: GuessLimits = DEFAULT_GUESS_LIMITS): Bucket[] {
  const what = "wrong codes";
  return [
    { key: `guess:session:${sessionId}`, limit: limits.perSession, what: `${what} in this session` },
    { key: `guess:addr:${address}`, limit: limits.perAddress, what: `${what} from this address` },
    { key: `guess:app:${tenant.appId}:${tenant.environment}`, limit: limits.perApp, what: `${what} for this app` },
  ];
}

/** The limits `config.pairingLimits` sets: its counts, in the defaults' windows. */
export function pairingLimitsOf(c: PairingLimitsConfig): { codes: CodeLimits; guesses: GuessLimits } {
  const within = (limit: Limit, max: number): Limit => ({ max, windowSeconds: limit.windowSeconds });
  const codes = DEFAULT_CODE_LIMITS;
  const guesses = DEFAULT_GUESS_LIMITS;
  return {
    codes: { perAddress: within(codes.perAddress, c.codesPerAddressPerHour), perConnectKey: within(codes.perConnectKey, c.codesPerConnectKeyPerMinute) },
    guesses: {
      perSession: within(guesses.perSession, c.guessesPerSession),
      perAddress: within(guesses.perAddress, c.guessesPerAddress),
      perApp: within(guesses.perApp, c.guessesPerApp),
    },
  };
}

export function deviceCodeBuckets(connectKey: string, address: string, limits: CodeLimits = DEFAULT_CODE_LIMITS): Bucket[] {
  return [
    { key: `code:pk:${connectKey}`, limit: limits.perConnectKey, what: "pairing requests with this connect key" },
    { key: `code:addr:${address}`, limit: limits.perAddress, what: "pairing requests from this address" },
  ];
}
