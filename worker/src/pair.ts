import os from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { apiClient, errorOf } from "./api.js";
import type { Store } from "./store.js";
import { CLIENT_NAME, CLIENT_VERSION } from "./version.js";

export interface PairOptions {
  server: string;
  connectKey: string;
  store: Store;
  /** Where the person reads what happens. */
  print: (line: string) => void;
  signal?: AbortSignal;
}

/** Exit codes of `pair`: 0 paired, 1 refused or failed. */
export type PairResult = { ok: true; machineId: string } | { ok: false; reason: string };

/** Network failures while polling are retried with this backoff, up to the code's expiry. */
const NETWORK_RETRY_MAX_MS = 30_000;

/**
 * Pairs this machine by RFC 8628: asks for a code, shows it the way `gh auth
 * login` does, polls at the server's interval (widening it on `slow_down`), and
 * stores the pairing token privately once the user approves in the browser.
 */
export async function pair(opts: PairOptions): Promise<PairResult> {
  const { print, signal } = opts;
  const api = apiClient(opts.server);
  const machine = { hostname: os.hostname(), platform: process.platform, arch: process.arch, client: CLIENT_NAME, client_version: CLIENT_VERSION };

  let started;
  try {
    started = await api.requestDeviceCode({ params: { pk: opts.connectKey }, body: machine, fetchOptions: { signal } });
  } catch (err) {
    return fail(print, `Could not reach ${opts.server}: ${(err as Error).message}`);
  }
  if (started.status !== 200) {
    const e = errorOf(started.body);
    if (started.status === 401) return fail(print, `The connect key was refused (${e.code}): ${e.message} Copy the pairing command again from the app.`);
    return fail(print, `The server refused to start pairing (${started.status}${e.code ? ` ${e.code}` : ""}): ${e.message ?? "no reason given"}`);
  }
  const code = started.body;
  print(`Pairing this machine (${machine.hostname}, ${machine.platform} ${machine.arch}) with ${code.app_name}.`);
  print("");
  print(`! First copy your one-time code: ${code.user_code}`);
  print(`Then open the "Connect a machine" page of ${code.app_name} (or ${code.verification_uri} in the browser where you use it), and enter the code.`);
  print("");
  print(`Waiting for approval (the code expires in ${Math.round(code.expires_in / 60)} minutes)...`);

  let interval = code.interval;
  let backoffMs = 1000;
  const expiresAt = Date.now() + code.expires_in * 1000;
  for (;;) {
    await sleep(interval * 1000, undefined, { signal });
    let polled;
    try {
      polled = await api.pollDeviceToken({ params: { pk: opts.connectKey }, body: { device_code: code.device_code }, fetchOptions: { signal } });
      backoffMs = 1000;
    } catch (err) {
      if (signal?.aborted) throw err;
      if (Date.now() > expiresAt) return fail(print, "The code expired while the server could not be reached. Run the command again.");
      print(`  (the server did not answer: ${(err as Error).message}; trying again)`);
      await sleep(backoffMs, undefined, { signal });
      backoffMs = Math.min(backoffMs * 2, NETWORK_RETRY_MAX_MS);
      continue;
    }
    if (polled.status === 200) {
      const t = polled.body;
      opts.store.writeCredentials({
        server: t.server_url,
        connectUrl: t.connect_url,
        machineId: t.machine_id,
        pairingToken: t.pairing_token,
        environment: t.environment,
        appName: t.app_name,
        pairedAt: new Date().toISOString(),
      });
      opts.store.writeSettings({ ...opts.store.readSettings(), server: opts.server, connectKey: opts.connectKey });
      print(`✓ Paired with ${t.app_name} as machine ${t.machine_id}.`);
      print(`  The pairing token is saved in ${opts.store.credentialsPath} (readable only by you).`);
      return { ok: true, machineId: t.machine_id };
    }
    const e = errorOf(polled.body);
    if ((polled.status as number) === 503) {
      // The service is unavailable for a moment (its database, say): like no answer, keep polling until the code expires.
      if (Date.now() > expiresAt) return fail(print, "The code expired while the service was unavailable. Run the command again.");
      print(`  (the service is unavailable for a moment${e.code ? ` (${e.code})` : ""}; trying again)`);
      await sleep(backoffMs, undefined, { signal });
      backoffMs = Math.min(backoffMs * 2, NETWORK_RETRY_MAX_MS);
      continue;
    }
    switch (e.code) {
      case "authorization_pending":
        continue;
      case "slow_down":
        interval = e.interval ?? interval + 5;
        continue;
      case "access_denied":
        return fail(print, "The pairing was denied in the browser. Nothing was paired.");
      case "expired_token":
        return fail(print, "The code expired before it was approved. Run the command again for a new code.");
      case "rate_limited":
        interval += 5;
        continue;
      default:
        return fail(print, `Pairing failed (${polled.status}${e.code ? ` ${e.code}` : ""}): ${e.message ?? "no reason given"}`);
    }
  }
}

function fail(print: (line: string) => void, reason: string): PairResult {
  print(`✗ ${reason}`);
  return { ok: false, reason };
}
