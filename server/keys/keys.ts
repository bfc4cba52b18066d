import type { Notifications, Prisma, Sql, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId, secretMatches } from "../crypto.js";
import type { Environment, KeyKind } from "@svc/contract";
import { isConnectKey, newAppKey, newConnectKey, parseAppKey } from "./format.js";

/** Who an app key or connect key speaks for. */
export interface Tenant {
  appId: string;
  environment: Environment;
}

export interface NewKeys extends Tenant {
  appKey: string;
  connectKey: string;
}

export interface KeyInfo extends Tenant {
  kind: KeyKind;
  /** App keys: the `<id>` of `sk_svc_<id>.<secret>`. Connect keys: the key itself (public). */
  id: string;
  display: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  /** App keys only, to the minute. */
  lastUsedAt: string | null;
  state: "active" | "expiring" | "expired" | "revoked";
  /** What the owner calls it; null: unnamed. */
  name: string | null;
  /** The dashboard member (owner id) who made it; null: the CLI or the app's creation on the first start. */
  createdBy: string | null;
}

/** Who makes a key and what it is called (the dashboard's; the CLI names neither). */
export interface KeyOrigin {
  name?: string | null;
  createdBy?: string | null;
}

/** Announces a changed app key (payload: its id) to every instance, which drops it from its cache. */
export const APP_KEY_CHANGED_CHANNEL = "svc_app_key_changed";
/** How long a verified app key's row is reused: short, should a change's notification be lost. */
const KEY_CACHE_MS = 5_000;

interface CachedKey {
  id: string;
  appId: string;
  environment: Environment;
  secretHash: string;
  revokedAt: Date | null;
  expiresAt: Date | null;
  lastUsedAt: Date | null;
  readAt: number;
}

/** Default grace period of a rotated key: 24 hours. */
export const DEFAULT_ROTATION_GRACE_SECONDS = 24 * 60 * 60;

/**
 * Apps and their keys: creation, rotation with a grace period, revocation, and
 * verification of presented keys. App key secrets are stored only as hashes.
 */
export class KeyService {
  /** App key rows recently read, by id: the check runs on every app request. */
  private readonly cache = new Map<string, CachedKey>();
  /** Reads of a key's row under way: the requests that come meanwhile (a burst once its cached row went stale) wait for the same read. */
  private readonly reading = new Map<string, Promise<CachedKey | undefined>>();
  /** Counts the key changes heard: a read that began before one is not cached. */
  private changes = 0;

  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
    private readonly db: Sql & Notifications,
  ) {}

  /** Drops cached keys changed by any instance (or the CLI); returns how to stop listening. */
  async listen(): Promise<() => Promise<void>> {
    return this.db.listen(APP_KEY_CHANGED_CHANNEL, (id) => this.forget(id));
  }

  private forget(id: string): void {
    this.changes++;
    this.cache.delete(id);
    this.reading.delete(id);
  }

  private async changed(id: string): Promise<void> {
    this.forget(id);
    await this.db.notify(APP_KEY_CHANGED_CHANNEL, id);
  }

  /** `within`: more to do in the same transaction (the dashboard makes its creator a member). */
  async createApp(name: string, environment: Environment, within?: (tx: Tx, appId: string) => Promise<void>, origin: KeyOrigin = {}): Promise<NewKeys> {
    const appId = randomId("app_", 16);
    return this.prisma.$transaction(async (tx) => {
      await tx.app.create({ data: { id: appId, name } });
      await within?.(tx, appId);
      return this.issueKeys(tx, { appId, environment }, origin);
    });
  }

  /** One new key of one kind (the dashboard's "create key"): the whole key, shown once, and its listing. */
  async createKey(appId: string, environment: Environment, kind: KeyKind, origin: KeyOrigin = {}): Promise<{ key: string; info: KeyInfo }> {
    const named = { name: origin.name ?? null, createdBy: origin.createdBy ?? null };
    if (kind === "app") {
      const k = newAppKey();
      const row = await this.prisma.appKey.create({ data: { id: k.id, appId, environment, secretHash: hashSecret(k.secret), hint: k.hint, ...named } });
      return { key: k.key, info: this.info("app", row.id, row.hint, row) };
    }
    const row = await this.prisma.connectKey.create({ data: { key: newConnectKey(), appId, environment, ...named } });
    return { key: row.key, info: this.info("connect", row.key, row.key, row) };
  }

  /** A fresh app key and connect key for an existing app and environment. */
  async createKeys(appId: string, environment: Environment): Promise<NewKeys> {
    return this.prisma.$transaction(async (tx) => {
      if (!(await tx.app.findUnique({ where: { id: appId } }))) throw new ApiError("not_found", `No app ${appId}.`);
      return this.issueKeys(tx, { appId, environment });
    });
  }

  private async issueKeys(tx: Tx, tenant: Tenant, origin: KeyOrigin = {}): Promise<NewKeys> {
    const appKey = newAppKey();
    const connectKey = newConnectKey();
    const named = { name: origin.name ?? null, createdBy: origin.createdBy ?? null };
    await tx.appKey.create({
      data: { id: appKey.id, ...tenant, secretHash: hashSecret(appKey.secret), hint: appKey.hint, ...named },
    });
    await tx.connectKey.create({ data: { key: connectKey, ...tenant, ...named } });
    return { ...tenant, appKey: appKey.key, connectKey };
  }

  async listApps() {
    const apps = await this.prisma.app.findMany({ orderBy: { createdAt: "asc" } });
    return apps.map((a) => ({ appId: a.id, name: a.name, createdAt: a.createdAt.toISOString() }));
  }

  async listKeys(appId: string): Promise<KeyInfo[]> {
    if (!(await this.prisma.app.findUnique({ where: { id: appId } }))) throw new ApiError("not_found", `No app ${appId}.`);
    const [appKeys, connectKeys] = await Promise.all([
      this.prisma.appKey.findMany({ where: { appId }, orderBy: { createdAt: "asc" } }),
      this.prisma.connectKey.findMany({ where: { appId }, orderBy: { createdAt: "asc" } }),
    ]);
    return [
      ...appKeys.map((k) => this.info("app", k.id, k.hint, k)),
      ...connectKeys.map((k) => this.info("connect", k.key, k.key, k)),
    ];
  }

  private info(
    kind: KeyKind,
    id: string,
    display: string,
    k: { appId: string; environment: Environment; createdAt: Date; expiresAt: Date | null; revokedAt: Date | null; lastUsedAt?: Date | null; name: string | null; createdBy: string | null },
  ): KeyInfo {
    const now = this.clock.now();
    const state = k.revokedAt ? "revoked" : k.expiresAt ? (k.expiresAt <= now ? "expired" : "expiring") : "active";
    return {
      kind,
      id,
      display,
      appId: k.appId,
      environment: k.environment,
      createdAt: k.createdAt.toISOString(),
      expiresAt: k.expiresAt?.toISOString() ?? null,
      revokedAt: k.revokedAt?.toISOString() ?? null,
      lastUsedAt: k.lastUsedAt?.toISOString() ?? null,
      state,
      name: k.name,
      createdBy: k.createdBy,
    };
  }

  /**
   * Replaces a key by a new one of the same kind, app and environment. The old
   * key keeps working for `graceSeconds` (0: it stops now), so deployments can
   * switch over without downtime.
   */
  async rotate(ref: string, graceSeconds = DEFAULT_ROTATION_GRACE_SECONDS, appId?: string, by: string | null = null): Promise<{ kind: KeyKind; key: string; replaced: string; oldKeyExpiresAt: string } & Tenant> {
    const expiresAt = new Date(this.clock.now().getTime() + graceSeconds * 1000);
    const result = await this.prisma.$transaction(async (tx) => {
      const found = await this.findLiveKey(tx, ref, appId);
      // The new key keeps the old one's name; it was made by whoever rotated it.
      const named = { name: found.name, createdBy: by };
      if (found.kind === "app") {
        const next = newAppKey();
        await tx.appKey.create({ data: { id: next.id, appId: found.appId, environment: found.environment, secretHash: hashSecret(next.secret), hint: next.hint, ...named } });
        await tx.appKey.update({ where: { id: found.id }, data: { expiresAt, replacedBy: next.id } });
        return { kind: "app", key: next.key, replaced: found.id, oldKeyExpiresAt: expiresAt.toISOString(), appId: found.appId, environment: found.environment } as const;
      }
      const next = newConnectKey();
      await tx.connectKey.create({ data: { key: next, appId: found.appId, environment: found.environment, ...named } });
      await tx.connectKey.update({ where: { key: found.id }, data: { expiresAt } });
      return { kind: "connect", key: next, replaced: found.id, oldKeyExpiresAt: expiresAt.toISOString(), appId: found.appId, environment: found.environment } as const;
    });
    if (result.kind === "app") await this.changed(result.replaced);
    return result;
  }

  /** Stops a key at once. */
  async revoke(ref: string, appId?: string): Promise<KeyInfo> {
    const revokedAt = this.clock.now();
    const info = await this.prisma.$transaction(async (tx) => {
      const found = await this.findLiveKey(tx, ref, appId);
      if (found.kind === "app") {
        const k = await tx.appKey.update({ where: { id: found.id }, data: { revokedAt } });
        return this.info("app", k.id, k.hint, k);
      }
      const k = await tx.connectKey.update({ where: { key: found.id }, data: { revokedAt } });
      return this.info("connect", k.key, k.key, k);
    });
    if (info.kind === "app") await this.changed(info.id);
    return info;
  }

  /** `ref`: an app key id, a full app key, or a connect key; with `appId`, another app's key is answered like one that does not exist. */
  private async findLiveKey(tx: Tx, ref: string, appId?: string): Promise<{ kind: KeyKind; id: string; name: string | null } & Tenant> {
    const found = await this.findKey(tx, ref, appId);
    if (found.revokedAt) throw new ApiError("invalid_request", `This ${found.kind} key is already revoked.`);
    return found;
  }

  private async findKey(tx: Tx, ref: string, appId?: string): Promise<{ kind: KeyKind; id: string; name: string | null; revokedAt: Date | null } & Tenant> {
    if (isConnectKey(ref)) {
      const k = await tx.connectKey.findUnique({ where: { key: ref } });
      if (!k || (appId !== undefined && k.appId !== appId)) throw new ApiError("not_found", "No such connect key.");
      return { kind: "connect", id: k.key, appId: k.appId, environment: k.environment, name: k.name, revokedAt: k.revokedAt };
    }
    const id = parseAppKey(ref)?.id ?? ref.replace(/^sk_svc_/, "");
    const k = await tx.appKey.findUnique({ where: { id } });
    if (!k || (appId !== undefined && k.appId !== appId)) throw new ApiError("not_found", "No such app key.");
    return { kind: "app", id: k.id, appId: k.appId, environment: k.environment, name: k.name, revokedAt: k.revokedAt };
  }

  /** Names a key, or clears its name (`null`); revoked keys too, so a list stays readable. */
  async rename(ref: string, appId: string, name: string | null): Promise<KeyInfo> {
    const found = await this.findKey(this.prisma, ref, appId);
    if (found.kind === "app") {
      const k = await this.prisma.appKey.update({ where: { id: found.id }, data: { name } });
      return this.info("app", k.id, k.hint, k);
    }
    const k = await this.prisma.connectKey.update({ where: { key: found.id }, data: { name } });
    return this.info("connect", k.key, k.key, k);
  }

  /** Checks an app key: the id finds the row, the secret is compared with its hash in constant time. */
  async verifyAppKey(presented: string): Promise<Tenant & { keyId: string }> {
    const parsed = parseAppKey(presented);
    if (!parsed) throw new ApiError("invalid_credential", "The app key is malformed: expected sk_svc_<id>.<secret>.");
    const k = await this.appKeyRow(parsed.id);
    // Compare even when the id is unknown, so timing does not tell which ids exist.
    const ok = secretMatches(parsed.secret, k?.secretHash ?? UNKNOWN_KEY_HASH);
    if (!k || !ok) throw new ApiError("invalid_credential", "The app key is not valid: no key of this service has this id and secret. Check it was copied whole; app keys are made in the dashboard (Keys) or with `svc keys create --app <appId>`, and shown once.");
    if (k.revokedAt) throw new ApiError("revoked_credential", "The app key has been revoked.");
    const now = this.clock.now();
    if (k.expiresAt && k.expiresAt <= now) throw new ApiError("revoked_credential", "The app key was rotated and its grace period is over.");
    // "Last used" to the minute: at most one write per key per minute on the request path (marked before
    // the write, so the key's other requests meanwhile do not write it too; a write that failed is tried again).
    if (!k.lastUsedAt || now.getTime() - k.lastUsedAt.getTime() >= LAST_USED_RESOLUTION_MS) {
      const before = k.lastUsedAt;
      k.lastUsedAt = now;
      try {
        await this.db.query(`UPDATE app_keys SET last_used_at = $2 WHERE id = $1`, [k.id, now], { prepared: true });
      } catch (err) {
        if (k.lastUsedAt === now) k.lastUsedAt = before;
        throw err;
      }
    }
    return { appId: k.appId, environment: k.environment, keyId: k.id };
  }

  /**
   * An app key's row, from the cache while it is fresh. A change made here or
   * announced by another instance drops it at once (and keeps a read begun before
   * it out of the cache); a lost announcement costs at most KEY_CACHE_MS. Once the
   * row is stale, the key's requests meanwhile share one read: a burst of 1,000
   * requests is one statement, not 1,000. Raw SQL through the pool, not Prisma:
   * this runs on every app request.
   */
  private async appKeyRow(id: string): Promise<CachedKey | undefined> {
    const hit = this.cache.get(id);
    if (hit && Date.now() - hit.readAt < KEY_CACHE_MS) return hit;
    const under = this.reading.get(id);
    if (under) return under;
    const changes = this.changes;
    const read = this.readAppKey(id).then((entry) => {
      if (entry && changes === this.changes) {
        if (this.cache.size > 10_000) this.cache.clear();
        this.cache.set(id, entry);
      }
      return entry;
    });
    this.reading.set(id, read);
    const clear = () => {
      if (this.reading.get(id) === read) this.reading.delete(id);
    };
    read.then(clear, clear);
    return read;
  }

  private async readAppKey(id: string): Promise<CachedKey | undefined> {
    const [row] = await this.db.query<{ id: string; app_id: string; environment: Environment; secret_hash: string; revoked_at: Date | string | null; expires_at: Date | string | null; last_used_at: Date | string | null }>(
      `SELECT id, app_id, environment::text AS environment, secret_hash, revoked_at, expires_at, last_used_at FROM app_keys WHERE id = $1`,
      [id],
      { prepared: true },
    );
    if (!row) return undefined;
    const date = (d: Date | string | null) => (d === null ? null : new Date(d));
    return { id: row.id, appId: row.app_id, environment: row.environment, secretHash: row.secret_hash, revokedAt: date(row.revoked_at), expiresAt: date(row.expires_at), lastUsedAt: date(row.last_used_at), readAt: Date.now() };
  }

  /** Resolves the connect key of a pairing path to its app and environment. */
  async resolveConnectKey(key: string): Promise<Tenant> {
    if (!isConnectKey(key)) throw new ApiError("invalid_credential", "The connect key in the path is malformed: expected pk_svc_<key>.");
    const k = await this.prisma.connectKey.findUnique({ where: { key } });
    if (!k) throw new ApiError("invalid_credential", "The connect key is not known.");
    if (k.revokedAt) throw new ApiError("revoked_credential", "The connect key has been revoked.");
    if (k.expiresAt && k.expiresAt <= this.clock.now()) throw new ApiError("revoked_credential", "The connect key was rotated and its grace period is over.");
    return { appId: k.appId, environment: k.environment };
  }

  async isEmpty(): Promise<boolean> {
    return (await this.prisma.app.count()) === 0;
  }
}

const UNKNOWN_KEY_HASH = hashSecret("no such key");
const LAST_USED_RESOLUTION_MS = 60_000;

