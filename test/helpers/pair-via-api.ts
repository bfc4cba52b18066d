import fs from "node:fs";
import path from "node:path";

/** A machine paired through the API, as `svc-worker pair` would have left it. */
export interface PairedMachine {
  home: string;
  machineId: string;
  token: string;
  /** The session of the user who approved it. */
  session: string;
  /** The codes it was paired with (both used up now). */
  deviceCode: string;
  userCode: string;
}

/**
 * Pairs a machine for `user` through the real endpoints (code, session, approve,
 * token) and writes what `svc-worker pair` would have written into `home` (a
 * fresh config folder), with `settings` as its config.json. Free of vitest, so
 * the benchmarks use it too.
 */
export async function pairInto(
  home: string,
  server: { url: string; fetch?(path: string, init?: RequestInit): Promise<Response> },
  keys: { appKey: string; connectKey: string },
  user: string,
  settings: Record<string, unknown> = {},
  hostname = "test-machine",
): Promise<PairedMachine> {
  const call = server.fetch ? server.fetch.bind(server) : (p: string, init?: RequestInit) => fetch(`${server.url}${p}`, init);
  const post = async (p: string, body: unknown, token?: string) => {
    const res = await call(p, { method: "POST", headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });
    const json = (await res.json()) as Record<string, string>;
    if (res.status !== 200) throw new Error(`${p} answered ${res.status}: ${JSON.stringify(json)}`);
    return json;
  };
  const code = await post(`/c/${keys.connectKey}/v1/device/code`, { hostname, platform: "linux", arch: "x64", client: "svc-worker" });
  const { session } = await post("/v1/end_users/session", { user }, keys.appKey);
  await post("/v1/device/approve", { user_code: code.user_code }, session);
  const t = await post(`/c/${keys.connectKey}/v1/device/token`, { device_code: code.device_code });
  fs.writeFileSync(
    path.join(home, "credentials.json"),
    JSON.stringify({ server: t.server_url, connectUrl: t.connect_url, machineId: t.machine_id, pairingToken: t.pairing_token, environment: t.environment, appName: t.app_name, pairedAt: new Date().toISOString() }),
    { mode: 0o600 },
  );
  fs.writeFileSync(path.join(home, "config.json"), JSON.stringify(settings), { mode: 0o600 });
  return { home, machineId: t.machine_id, token: t.pairing_token, session, deviceCode: code.device_code, userCode: code.user_code };
}
