import fs from "node:fs";
import path from "node:path";
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

/** Name of the key file made in the data folder when SVC_SEALING_KEY is not set. */
export const SEALING_KEY_FILE = "sealing.key";

/** What a sealed value starts with: the format's version, so a later format can sit beside it. */
const PREFIX = "sealed:v1:";
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Secrets the service must keep usable (a webhook's `whsec_` signing secret has
 * to sign, so it cannot be hashed) are sealed at rest with AES-256-GCM: a fresh
 * 12-byte nonce per value, the tag authenticating it, and `aad` (the row's id)
 * binding the sealed value to its row, so a sealed secret copied into another
 * row does not open. Stored as `sealed:v1:<base64url of nonce | tag | ciphertext>`.
 */
export interface SecretSealer {
  seal(plaintext: string, aad: string): string;
  open(sealed: string, aad: string): string;
}

export class Sealer implements SecretSealer {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error("the sealing key must be 32 bytes");
  }

  seal(plaintext: string, aad: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(aad, "utf8"));
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64url");
  }

  /** The plaintext; throws when the value was not sealed with this key for this `aad` (or was altered). */
  open(sealed: string, aad: string): string {
    if (!sealed.startsWith(PREFIX)) throw new Error("not a sealed value");
    const raw = Buffer.from(sealed.slice(PREFIX.length), "base64url");
    if (raw.length < IV_BYTES + TAG_BYTES) throw new Error("sealed value too short");
    const decipher = createDecipheriv("aes-256-gcm", this.key, raw.subarray(0, IV_BYTES));
    decipher.setAAD(Buffer.from(aad, "utf8"));
    decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString("utf8");
  }
}

/**
 * The sealing key: SVC_SEALING_KEY when set (several instances on one Postgres
 * must all be given the same one), else `<dataDir>/sealing.key`, 32 random bytes
 * made on first use with mode 0600 (fine for one instance; losing the file makes
 * the sealed secrets unreadable, and their endpoints must be created again).
 */
export function sealingKey(configured: Buffer | null, dataDir: string): Buffer {
  if (configured) return configured;
  const file = path.join(dataDir, SEALING_KEY_FILE);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (!fs.existsSync(file)) {
    // Written aside, then linked into place: never a half-written key, never one overwritten by another start.
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
    fs.writeFileSync(tmp, randomBytes(32).toString("base64") + "\n", { mode: 0o600, flag: "wx" });
    try {
      fs.linkSync(tmp, file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    } finally {
      fs.unlinkSync(tmp);
    }
  }
  const key = Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
  if (key.length !== 32) throw new Error(`${file} does not hold a 32-byte base64 key`);
  return key;
}

/** A sealer whose key is read (or made) only when a secret is first sealed or opened. */
export function lazySealer(configured: Buffer | null, dataDir: string): SecretSealer {
  let sealer: Sealer | null = null;
  const get = () => (sealer ??= new Sealer(sealingKey(configured, dataDir)));
  return { seal: (p, aad) => get().seal(p, aad), open: (s, aad) => get().open(s, aad) };
}
