import { hash, verify } from "@node-rs/argon2";

/**
 * Owner passwords: argon2id (`@node-rs/argon2`, prebuilt binaries from npm) with
 * OWASP's minimum parameters (19 MiB, 2 passes, 1 lane). Unlike the service's
 * random secrets (SHA-256 is right for those), a password is chosen by a person
 * and needs a slow, memory-hard hash.
 */
const PARAMS = { algorithm: 2 /* Argon2id */, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

export function hashPassword(password: string): Promise<string> {
  return hash(password, PARAMS);
}

export async function passwordMatches(password: string, stored: string): Promise<boolean> {
  try {
    return await verify(stored, password);
  } catch {
    return false;
  }
}

let dummy: Promise<string> | null = null;
/**
 * Verifies against a hash of nothing: a sign-in naming an unknown email (or an
 * account without a password) does the same work as a wrong password, so the
 * time of the answer does not tell which emails have accounts.
 */
export async function spendPasswordCheck(password: string): Promise<false> {
  dummy ??= hashPassword("no such account: the dummy hash");
  await passwordMatches(password, await dummy);
  return false;
}
