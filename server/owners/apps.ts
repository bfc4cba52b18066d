import type { Environment, KeyKind } from "@svc/contract";
import type { KeyInfo, KeyService } from "../keys/keys.js";
import { parseAppKey } from "../keys/format.js";
import type { OwnerMembers } from "./members.js";

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
}

/** A key as the dashboard lists it: never a secret nor a hash. */
export const ownerKey = (k: KeyInfo): OwnerKeyView => ({
  id: k.id,
  kind: k.kind,
  environment: k.environment,
  display: k.display,
  createdAt: k.createdAt,
  expiresAt: k.expiresAt,
  revokedAt: k.revokedAt,
  lastUsedAt: k.lastUsedAt,
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
  ) {}

  /** A new app whose creator is its first `owner`, with its test environment's app and connect keys (shown once). */
  async create(ownerId: string, name: string) {
    const created = await this.keys.createApp(name, "test", (tx, appId) => this.members.add(appId, ownerId, "owner", tx));
    const listed = await this.keys.listKeys(created.appId);
    const appKeyId = parseAppKey(created.appKey)!.id;
    const app = (await this.members.appsOf(ownerId)).find((a) => a.id === created.appId)!;
    return {
      app,
      keys: [
        { ...ownerKey(listed.find((k) => k.id === appKeyId)!), secret: created.appKey },
        { ...ownerKey(listed.find((k) => k.id === created.connectKey)!), secret: created.connectKey },
      ],
    };
  }

  async listKeys(appId: string): Promise<OwnerKeyView[]> {
    return (await this.keys.listKeys(appId)).map(ownerKey);
  }

  async createKey(appId: string, environment: Environment, kind: KeyKind) {
    const { key, info } = await this.keys.createKey(appId, environment, kind);
    return { ...ownerKey(info), secret: key };
  }

  async rotateKey(appId: string, keyId: string, graceSeconds: number) {
    const r = await this.keys.rotate(keyId, graceSeconds, appId);
    const listed = await this.keys.listKeys(appId);
    const newId = r.kind === "app" ? parseAppKey(r.key)!.id : r.key;
    return { previous: ownerKey(listed.find((k) => k.id === r.replaced)!), key: { ...ownerKey(listed.find((k) => k.id === newId)!), secret: r.key } };
  }

  async revokeKey(appId: string, keyId: string): Promise<OwnerKeyView> {
    return ownerKey(await this.keys.revoke(keyId, appId));
  }
}
