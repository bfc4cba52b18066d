import type { z } from "zod";
import { USER_CODE_ALPHABET, type DeviceAnswerResponse, type DeviceCodeRequest, type DeviceCodeResponse, type DeviceLookupResponse, type DeviceTokenResponse } from "@svc/contract";
import type { Prisma, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { SessionPrincipal } from "../sessions/sessions.js";
import type { PublicUrls } from "../public-urls.js";
import type { RateLimiter } from "../rate-limit/rate-limiter.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId } from "../crypto.js";
import { displayUserCode, newDeviceCode, newPairingToken, newUserCode, normalizeUserCode } from "./codes.js";
import { DEFAULT_CODE_LIMITS, DEFAULT_GUESS_LIMITS, deviceCodeBuckets, guessBuckets, type CodeLimits, type GuessLimits } from "./limits.js";
import { connectInfo } from "./connect-info.js";
import type { WebhookFacts } from "../webhooks/facts.js";

/** How long a device code and its user code live: 15 minutes. */
export const DEVICE_CODE_TTL_SECONDS = 900;
/** RFC 8628 section 3.5: each `slow_down` widens the interval by 5 seconds, for good. */
export const SLOW_DOWN_STEP_SECONDS = 5;
/** What an unknown code is told; another app's, environment's or user's code is told the same. */
const NO_SUCH_CODE = "No pairing request has this code: check the code your machine shows.";
/** The rule a malformed code broke: which letters a code is made of (no vowels, so `ABCD-EFGH` is not one). */
const MALFORMED_CODE = `A code is 8 letters, each one of ${USER_CODE_ALPHABET} (no vowels, no Y), shown like BCDF-GHJK; case and dashes do not matter.`;
/** A poll this much early still counts as on time (timer and clock granularity). */
const POLL_TOLERANCE_MS = 100;

type DeviceRow = NonNullable<Awaited<ReturnType<Prisma["deviceAuthorization"]["findUnique"]>>>;

/**
 * Pairing a machine to one end user by the device authorization grant (RFC 8628):
 * a machine asks for codes with the app's connect key, the user enters the user
 * code on the connect page in a session the app minted for them, and the machine's
 * next poll gets a pairing token bound to that session's user, exactly once.
 */
export class DeviceFlowService {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
    private readonly limiter: RateLimiter,
    private readonly urls: PublicUrls,
    private readonly pollIntervalSeconds: number,
    /** Told when a machine is paired (webhooks). */
    private readonly facts: WebhookFacts | null = null,
    /** Device codes per client address and per connect key (`PAIRING_CODES_PER_*`). */
    private readonly codeLimits: CodeLimits = DEFAULT_CODE_LIMITS,
    /** Wrong user codes per session, client address and app (`PAIRING_GUESSES_PER_*`). */
    private readonly guessLimits: GuessLimits = DEFAULT_GUESS_LIMITS,
  ) {}

  async requestCode(
    tenant: Tenant,
    connectKey: string,
    machine: z.infer<typeof DeviceCodeRequest>,
    address: string,
  ): Promise<z.infer<typeof DeviceCodeResponse>> {
    await this.limiter.take(deviceCodeBuckets(connectKey, address, this.codeLimits));
    const app = await this.prisma.app.findUniqueOrThrow({ where: { id: tenant.appId } });
    const deviceCode = newDeviceCode();
    const now = this.clock.now();
    // A fresh user code clashes with a stored one about once in 2.6e10 / (codes stored): try again then.
    for (let attempt = 0; ; attempt++) {
      const userCode = newUserCode();
      try {
        await this.prisma.deviceAuthorization.create({
          data: {
            id: randomId("dev_", 20),
            ...tenant,
            connectKey,
            deviceCodeHash: hashSecret(deviceCode),
            userCodeHash: hashSecret(userCode),
            hostname: machine.hostname,
            platform: machine.platform,
            arch: machine.arch,
            client: machine.client,
            clientVersion: machine.client_version ?? null,
            intervalSeconds: this.pollIntervalSeconds,
            createdAt: now,
            expiresAt: new Date(now.getTime() + DEVICE_CODE_TTL_SECONDS * 1000),
          },
        });
        const shown = displayUserCode(userCode);
        return {
          device_code: deviceCode,
          user_code: shown,
          verification_uri: this.urls.connectPage,
          verification_uri_complete: `${this.urls.connectPage}#code=${shown}`,
          expires_in: DEVICE_CODE_TTL_SECONDS,
          interval: this.pollIntervalSeconds,
          app_name: app.name,
        };
      } catch (err) {
        if (attempt < 3 && (err as { code?: string }).code === "P2002") continue;
        throw err;
      }
    }
  }

  /**
   * The token poll. Polls of one device code are serialised on its row, so the
   * pairing token is handed out once however many polls race, and `slow_down`
   * widens the interval exactly once per early poll.
   */
  async pollToken(deviceCode: string, tenant: Tenant | null): Promise<z.infer<typeof DeviceTokenResponse>> {
    const outcome = await this.prisma.$transaction(async (tx) => {
      const now = this.clock.now();
      const hash = hashSecret(deviceCode);
      // The tenant is in the lookup itself: another app's code is never found, never locked (no wait behind its owner's polls), as cheap as an unknown one.
      const locked = tenant
        ? await tx.$queryRaw<{ id: string }[]>`
            SELECT id FROM device_authorizations WHERE device_code_hash = ${hash} AND app_id = ${tenant.appId} AND environment = ${tenant.environment}::"Environment" FOR UPDATE`
        : await tx.$queryRaw<{ id: string }[]>`SELECT id FROM device_authorizations WHERE device_code_hash = ${hash} FOR UPDATE`;
      const d = locked.length ? await tx.deviceAuthorization.findUnique({ where: { id: locked[0].id } }) : null;
      // Another app's device code is as unknown as a made-up one.
      if (!d || (tenant && (d.appId !== tenant.appId || d.environment !== tenant.environment)) || d.status === "consumed") {
        return { error: new ApiError("invalid_grant", "The device code is unknown or has already been used: start pairing again.") };
      }
      if (d.expiresAt <= now) return { error: new ApiError("expired_token") };
      if (d.status === "denied") return { error: new ApiError("access_denied") };
      if (d.lastPolledAt && now.getTime() - d.lastPolledAt.getTime() < d.intervalSeconds * 1000 - POLL_TOLERANCE_MS) {
        const interval = d.intervalSeconds + SLOW_DOWN_STEP_SECONDS;
        await tx.deviceAuthorization.update({ where: { id: d.id }, data: { intervalSeconds: interval, lastPolledAt: now } });
        return { error: new ApiError("slow_down", `Polling too fast: wait ${interval} seconds between polls from now on.`, { interval }) };
      }
      if (d.status === "pending") {
        await tx.deviceAuthorization.update({ where: { id: d.id }, data: { lastPolledAt: now } });
        return { error: new ApiError("authorization_pending") };
      }
      return { token: await this.pair(tx, d, now), device: d };
    });
    if ("error" in outcome) throw outcome.error;
    const d = outcome.device;
    void this.facts?.machinePaired({ machineId: outcome.token.machine_id, appId: d.appId, environment: d.environment, endUserId: d.endUserId! }, d.hostname, d.platform);
    return outcome.token;
  }

  /** Makes the machine, owned by the user who approved (never by anything the machine said), and hands out its token. */
  private async pair(tx: Tx, d: DeviceRow, now: Date): Promise<z.infer<typeof DeviceTokenResponse>> {
    const token = newPairingToken();
    const machineId = randomId("mch_", 20);
    await tx.machine.create({
      data: {
        id: machineId,
        appId: d.appId,
        environment: d.environment,
        endUserId: d.endUserId!,
        tokenHash: hashSecret(token),
        hostname: d.hostname,
        platform: d.platform,
        arch: d.arch,
        client: d.client,
        clientVersion: d.clientVersion,
        createdAt: now,
      },
    });
    await tx.deviceAuthorization.update({ where: { id: d.id }, data: { status: "consumed", machineId, lastPolledAt: now } });
    const app = await tx.app.findUniqueOrThrow({ where: { id: d.appId } });
    return {
      pairing_token: token,
      token_type: "pairing",
      machine_id: machineId,
      connect_url: this.urls.workerConnection,
      server_url: this.urls.base,
      app_name: app.name,
      environment: d.environment,
    };
  }

  /** What the connect page shows for this session: the app's name and the pairing command. */
  connectInfo(session: SessionPrincipal) {
    return connectInfo(this.prisma, this.clock, this.urls, session);
  }

  /** What asks to be paired under this code, for the session's app only. */
  async lookup(session: SessionPrincipal, typed: string, address: string): Promise<z.infer<typeof DeviceLookupResponse>> {
    const d = await this.findPending(session, typed, address, "code");
    return {
      user_code: displayUserCode(normalizeUserCode(typed)!),
      hostname: d.hostname,
      platform: d.platform,
      arch: d.arch,
      client: d.client,
      client_version: d.clientVersion,
      requested_at: d.createdAt.toISOString(),
      expires_at: d.expiresAt.toISOString(),
    };
  }

  /** Approve binds the coming pairing token to the session's user; deny makes the next poll `access_denied`. */
  async answer(session: SessionPrincipal, typed: string, address: string, decision: "approve" | "deny"): Promise<z.infer<typeof DeviceAnswerResponse>> {
    const d = await this.findPending(session, typed, address, "user_code");
    const status = decision === "approve" ? "approved" : "denied";
    // Only a still-pending request moves: of two answers racing, one wins.
    const moved = await this.prisma.deviceAuthorization.updateMany({
      where: { id: d.id, status: "pending" },
      data: { status, endUserId: session.endUserId, answeredAt: this.clock.now() },
    });
    if (moved.count !== 1) {
      // Answered meanwhile: by this user (409), or by another, whose code it is now (as unknown as a made-up one).
      const answered = await this.prisma.deviceAuthorization.findUnique({ where: { id: d.id }, select: { endUserId: true } });
      if (answered?.endUserId !== session.endUserId) throw new ApiError("not_found", NO_SUCH_CODE);
      throw new ApiError("already_answered", "This pairing request has already been answered.");
    }
    return { user_code: displayUserCode(normalizeUserCode(typed)!), status };
  }

  /**
   * The pending request behind a typed code, in the session's own app and
   * environment. Wrong codes count against the guess limits (per session, per
   * client address, per app); once one is full, every code is refused until its
   * window ends, the right one included.
   */
  private async findPending(session: SessionPrincipal, typed: string, address: string, param: string): Promise<DeviceRow> {
    const code = normalizeUserCode(typed);
    if (!code) throw new ApiError("invalid_request", MALFORMED_CODE, { param });
    // Checked and counted with the buckets held: racing guesses cannot slip past a full one.
    const d = await this.limiter.admit(guessBuckets(session.sessionId, session, address, this.guessLimits), async (tx) => {
      // Another app's or environment's code, and a code another user of the app already answered (it is theirs now),
      // are as unknown as a made-up one (not even read: the tenant and the user are in the lookup), and count as a wrong guess like one.
      const mine = await tx.deviceAuthorization.findFirst({
        where: { userCodeHash: hashSecret(code), appId: session.appId, environment: session.environment, OR: [{ status: "pending" }, { endUserId: session.endUserId }] },
      });
      return { result: mine, count: mine === null };
    });
    if (!d) throw new ApiError("not_found", NO_SUCH_CODE);
    if (d.expiresAt <= this.clock.now()) throw new ApiError("expired", "This code has expired: run the pair command again for a new one.");
    if (d.status !== "pending") throw new ApiError("already_answered", "This pairing request has already been answered.");
    return d;
  }
}
