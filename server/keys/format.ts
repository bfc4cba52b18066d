import { APP_KEY_PREFIX, CONNECT_KEY_PREFIX } from "@svc/contract";
import { randomId, randomToken } from "../crypto.js";

const APP_KEY = /^sk_svc_([a-z0-9]{16})\.([A-Za-z0-9_-]{43})$/;
const CONNECT_KEY = /^pk_svc_[a-z0-9]{24}$/;

export function newAppKey(): { id: string; secret: string; key: string; hint: string } {
  const id = randomId("", 16);
  const secret = randomToken(32);
  const key = `${APP_KEY_PREFIX}${id}.${secret}`;
  return { id, secret, key, hint: `${APP_KEY_PREFIX}${id}.${secret.slice(0, 4)}…` };
}

export function parseAppKey(key: string): { id: string; secret: string } | null {
  const m = APP_KEY.exec(key);
  return m ? { id: m[1], secret: m[2] } : null;
}

export function newConnectKey(): string {
  return `${CONNECT_KEY_PREFIX}${randomId("", 24)}`;
}

export function isConnectKey(key: string): boolean {
  return CONNECT_KEY.test(key);
}
