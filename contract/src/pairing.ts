import { z } from "zod";
import { Environment, IsoTime, Machine, UserId } from "./common.js";

/** RFC 8628 user code: 8 characters of `BCDFGHJKLMNPQRSTVWXZ`, shown `XXXX-XXXX`, entered case- and dash-insensitively. */
export const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";
export const UserCode = z.string().min(1).max(32).describe("The code the user sees, `XXXX-XXXX`; case and dashes do not matter.");

export const DeviceCodeRequest = z.object({
  hostname: z.string().min(1).max(255),
  platform: z.string().min(1).max(64).describe("e.g. `linux`, `darwin`, `win32`."),
  arch: z.string().min(1).max(64).describe("e.g. `x64`, `arm64`."),
  client: z.string().min(1).max(128).describe("The pairing client's name, e.g. `svc-worker`."),
  client_version: z.string().max(64).optional(),
});

/** RFC 8628 section 3.2 device authorization response. */
export const DeviceCodeResponse = z.object({
  device_code: z.string().describe("`dc_...`: the machine's secret for its token polls; never shown to the user."),
  user_code: z.string().describe("`XXXX-XXXX`: shown to the user, who enters it on the connect page."),
  verification_uri: z.string().url().describe("The hosted connect page, where the user enters the code (opened from the app, which signs the user in)."),
  verification_uri_complete: z.string().url().describe("The connect page with the code filled in (in the URL fragment, never sent to a server)."),
  expires_in: z.number().int().describe("Seconds until the codes expire."),
  interval: z.number().int().describe("Seconds to wait between token polls."),
  app_name: z.string().describe("The name of the app the machine is being paired with."),
});

export const DeviceTokenRequest = z.object({
  device_code: z.string().min(1).max(256),
  grant_type: z.literal("urn:ietf:params:oauth:grant-type:device_code").optional(),
});

export const DeviceTokenResponse = z.object({
  pairing_token: z.string().describe("`pt_svc_...`: shown once; the machine's credential for its connection."),
  token_type: z.literal("pairing"),
  machine_id: z.string(),
  connect_url: z.string().describe("WebSocket URL the worker connects to, authenticated by the pairing token in the handshake."),
  server_url: z.string().describe("The service's base URL (without `/v1`)."),
  app_name: z.string(),
  environment: Environment,
});

export const ConnectInfo = z.object({
  app: z.object({ id: z.string(), name: z.string() }),
  environment: Environment,
  user: UserId,
  connectKey: z.string(),
  serverUrl: z.string(),
  pairingCommand: z
    .string()
    .describe(
      "What the user runs on the machine to pair it: the worker package from this service itself, no registry name, e.g. `npx --yes https://svc.example.com/worker/svc-worker-0.1.0.tgz pair --connect-key pk_svc_... --server https://svc.example.com`. Needs Node 20.19 or newer.",
    ),
  worker: z
    .object({
      version: z.string().describe("The `svc-worker` version this service speaks."),
      packageUrl: z.string().describe("Its npm package (`npx --yes <packageUrl> ...`), served by this service; immutable."),
      scriptUrl: z.string().describe("The same worker in one file, run with plain `node` (no npm); immutable."),
    })
    .optional()
    .describe("Where this service serves its worker, for a connect page of the app's own."),
});

export const DeviceLookupResponse = z.object({
  user_code: z.string(),
  hostname: z.string(),
  platform: z.string(),
  arch: z.string(),
  client: z.string(),
  client_version: z.string().nullable(),
  requested_at: IsoTime,
  expires_at: IsoTime,
});

export const UserCodeBody = z.object({ user_code: UserCode });
export const UserCodeQuery = z.object({ code: UserCode });
export const DeviceAnswerResponse = z.object({
  user_code: z.string(),
  status: z.enum(["approved", "denied"]),
});

export const MachineList = z.object({ data: z.array(Machine) });

export const MachineRemoved = z.object({
  id: z.string(),
  revokedAt: IsoTime.describe("From this moment the machine's pairing token is refused and its connection is closed."),
});
