import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { lazySealer, Sealer, sealingKey, SEALING_KEY_FILE } from "../../server/webhooks/seal.js";

/** Sealing the secrets the service must keep usable (webhook signing secrets). */
describe("sealed secrets", () => {
  const secret = `whsec_${randomBytes(24).toString("base64")}`;

  it("opens what it sealed, for the same row only; a changed value or another key does not open", () => {
    const sealer = new Sealer(randomBytes(32));
    const sealed = sealer.seal(secret, "we_1");
    expect(sealed).toMatch(/^sealed:v1:[A-Za-z0-9_-]+$/);
    expect(sealed).not.toContain(secret.slice(6, 18));
    expect(sealer.seal(secret, "we_1")).not.toBe(sealed); // a fresh nonce each time
    expect(sealer.open(sealed, "we_1")).toBe(secret);
    expect(() => sealer.open(sealed, "we_2")).toThrow();
    const bytes = Buffer.from(sealed.slice("sealed:v1:".length), "base64url");
    bytes[bytes.length - 1] ^= 1;
    expect(() => sealer.open(`sealed:v1:${bytes.toString("base64url")}`, "we_1")).toThrow();
    expect(() => new Sealer(randomBytes(32)).open(sealed, "we_1")).toThrow();
    expect(() => sealer.open(secret, "we_1")).toThrow(/not a sealed value/);
  });

  it("uses SVC_SEALING_KEY when set, else makes a 0600 key file in the data folder on first use and keeps it", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-seal-"));
    try {
      const configured = randomBytes(32);
      expect(sealingKey(configured, dir)).toBe(configured);
      expect(fs.existsSync(path.join(dir, SEALING_KEY_FILE))).toBe(false);

      const lazy = lazySealer(null, dir);
      expect(fs.existsSync(path.join(dir, SEALING_KEY_FILE))).toBe(false); // nothing until a secret is sealed
      const sealed = lazy.seal(secret, "we_1");
      const file = path.join(dir, SEALING_KEY_FILE);
      expect(fs.statSync(file).mode & 0o777).toBe(0o600);
      expect(Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64")).toHaveLength(32);
      // A later start reads the same key.
      expect(lazySealer(null, dir).open(sealed, "we_1")).toBe(secret);
      expect(fs.readdirSync(dir)).toEqual([SEALING_KEY_FILE]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
