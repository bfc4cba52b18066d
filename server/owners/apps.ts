import type { Environment, KeyKind } from "@svc/contract";
import type { KeyInfo, KeyService } from "../keys/keys.js";
import { parseAppKey } from "../keys/format.js";
import type { OwnerMembers } from "./members.js";
import type { Prisma } from "../db/open.js";

export interface OwnerKeyView {
  id: string;
  kind: KeyKind;
  environment: Environment;
  display: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  /** App keys: to the minute. Connect keys: always null (their use is not recorded). */
  lastUsedAt: string | null;
  name: string | null;
  createdBy: { id: string; email: string | null; name: string | null } | null;
}

type Creators = Map<string, { email: string; name: string | null }>;

/** A key as the dashboard lists it: never a secret nor a hash; its maker as their account says now. */
export const ownerKey = (k: KeyInfo, creators: Creators = new Map()): OwnerKeyView => ({
  id: k.id,
  kind: k.kind,
  environment: k.environment,
  display: k.display,
  createdAt: k.createdAt,
  expiresAt: k.expiresAt,
  revokedAt: k.revokedAt,
  lastUsedAt: k.lastUsedAt,
  name: k.name,
  createdBy: k.createdBy === null ? null : { id: k.createdBy, email: creators.get(k.createdBy)?.email ?? null, name: creators.get(k.createdBy)?.name ?? null },
});

/**
 * An owner's apps and their keys, over the KeyService (which the CLI uses too).
 * Membership is checked by the caller (`OwnerService.requireMember`); every key
 * lookup here is also scoped to the app, so another app's key id is answered like
 * one that does not exist.
 */
export class OwnerApps {
  constructor(
    private readonly keys: KeyService,
    private readonly members: OwnerMembers,
    private readonly prisma: Prisma,
  ) {}

  /** The accounts that made these keys, by owner id. */
  private async creators(keys: KeyInfo[]): Promise<Creators> {
    const ids = [...new Set(keys.map((k) => k.createdBy).filter((id): id is string => id !== null))];
    if (ids.length === 0) return new Map();
    const rows = await this.prisma.owner.findMany({ where: { id: { in: ids } }, select: { id: true, email: true, name: true } });
    return new Map(rows.map((o) => [o.id, { email: o.email, name: o.name }]));
  }

  private async views(keys: KeyInfo[]): Promise<OwnerKeyView[]> {
    const creators = await this.creators(keys);
    return keys.map((k) => ownerKey(k, creators));
  }

  /** A new app whose creator is its first `owner`, with its test environment's app and connect keys (shown once). */
  async create(ownerId: string, name: string) {
    const created = await this.keys.createApp(name, "test", (tx, appId) => this.members.add(appId, ownerId, "owner", tx), { createdBy: ownerId });
    const listed = await this.views(await this.keys.listKeys(created.appId));
    const appKeyId = parseAppKey(created.appKey)!.id;
    const app = (await this.members.appsOf(ownerId)).find((a) => a.id === created.appId)!;
    return {
      app,
      keys: [
        { ...listed.find((k) => k.id === appKeyId)!, secret: created.appKey },
        { ...listed.find((k) => k.id === created.connectKey)!, secret: created.connectKey },
      ],
    };
  }

  async listKeys(appId: string): Promise<OwnerKeyView[]> {
    return this.views(await this.keys.listKeys(appId));
  }

  async createKey(appId: string, environment: Environment, kind: KeyKind, ownerId: string, name?: string) {
    const { key, info } = await this.keys.createKey(appId, environment, kind, { name: name ?? null, createdBy: ownerId });
    return { ...(await this.views([info]))[0], secret: key };
  }

  async rotateKey(appId: string, keyId: string, graceSeconds: number, ownerId: string) {
    const r = await this.keys.rotate(keyId, graceSeconds, appId, ownerId);
    const listed = await this.views(await this.keys.listKeys(appId));
    const newId = r.kind === "app" ? parseAppKey(r.key)!.id : r.key;
    return { previous: listed.find((k) => k.id === r.replaced)!, key: { ...listed.find((k) => k.id === newId)!, secret: r.key } };
  }

  async renameKey(appId: string, keyId: string, name: string | null): Promise<OwnerKeyView> {
    return (await this.views([await this.keys.rename(keyId, appId, name)]))[0];
  }

  async revokeKey(appId: string, keyId: string): Promise<OwnerKeyView> {
    return (await this.views([await this.keys.revoke(keyId, appId)]))[0];
  }
}
