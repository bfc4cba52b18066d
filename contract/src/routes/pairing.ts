import { z } from "zod";
import { meta } from "../credentials.js";
import {
  ConnectInfo,
  DeviceAnswerResponse,
  DeviceCodeRequest,
  DeviceCodeResponse,
  DeviceLookupResponse,
  DeviceTokenRequest,
  DeviceTokenResponse,
  MachineList,
  MachineRemoved,
  UserCodeBody,
  UserCodeQuery,
} from "../pairing.js";
import { CreateSessionRequest, EndSessionsQuery, EndSessionsResponse, SessionResponse } from "../sessions.js";
import { appKeyErrors, c, connectKeyParam, errors, OPTIONS, sessionErrors } from "./shared.js";

/** Pairing a machine, end-user sessions and the browser routes (7-15). */
export const pairingContract = c.router(
  {
    // 7
    requestDeviceCode: {
      method: "POST",
      path: "/c/:pk/v1/device/code",
      summary: "Start pairing a machine (RFC 8628 device authorization)",
      description: "No credential: the connect key in the path names the app and environment.",
      pathParams: connectKeyParam,
      body: DeviceCodeRequest,
      responses: { 200: DeviceCodeResponse, ...errors(401) },
      metadata: meta({ auth: "connectKey" }),
    },
    // 8
    pollDeviceToken: {
      method: "POST",
      path: "/c/:pk/v1/device/token",
      summary: "Poll for the pairing token (RFC 8628 token request)",
      description:
        "400 `authorization_pending` until the user answers; `slow_down` (with the widened `interval`) when polled too fast; `access_denied` after a denial; `expired_token` after expiry. The device code yields its pairing token exactly once.",
      pathParams: connectKeyParam,
      body: DeviceTokenRequest,
      responses: { 200: DeviceTokenResponse, ...errors(401) },
      metadata: meta({ auth: "connectKey" }),
    },
    // 8, as the spec's state table writes it: the device code alone names the app
    pollDeviceTokenAlias: {
      method: "POST",
      path: "/v1/device/token",
      summary: "Poll for the pairing token (same as `/c/{pk}/v1/device/token`)",
      description: "The spec's state table names the token poll `/v1/device/token`; it is the same call, the device code naming the app.",
      body: DeviceTokenRequest,
      // 401: a credential sent to a route that takes none (wrong_credential_kind).
      responses: { 200: DeviceTokenResponse, ...errors(401) },
      metadata: meta({ auth: "none" }),
    },
    // 9
    createSession: {
      method: "POST",
      path: "/v1/end_users/session",
      summary: "Mint an end-user browser session",
      description: "A session acting for exactly `user`, for ten minutes. Send the user's browser to `url`.",
      body: CreateSessionRequest,
      responses: { 200: SessionResponse, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 10
    endSessions: {
      method: "DELETE",
      path: "/v1/end_users/session",
      summary: "End every live session of a user",
      query: EndSessionsQuery,
      responses: { 200: EndSessionsResponse, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 11
    getConnectInfo: {
      method: "GET",
      path: "/v1/connect",
      summary: "What the connect page shows: the app's name and the pairing command",
      responses: { 200: ConnectInfo, ...sessionErrors, ...errors(503) },
      metadata: meta({ auth: "session" }),
    },
    // 12
    lookupDevice: {
      method: "GET",
      path: "/v1/device/lookup",
      summary: "What is asking to be paired",
      query: UserCodeQuery,
      responses: { 200: DeviceLookupResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 13
    approveDevice: {
      method: "POST",
      path: "/v1/device/approve",
      summary: "Approve a pairing: binds the pairing token to the session's user",
      body: UserCodeBody,
      responses: { 200: DeviceAnswerResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 14
    denyDevice: {
      method: "POST",
      path: "/v1/device/deny",
      summary: "Deny a pairing: the worker is told `access_denied`",
      body: UserCodeBody,
      responses: { 200: DeviceAnswerResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 15
    listMachines: {
      method: "GET",
      path: "/v1/machines",
      summary: "This user's machines and their live state",
      responses: { 200: MachineList, ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // extension: the user removes one of their machines (the connect page's Remove)
    removeMachine: {
      method: "DELETE",
      path: "/v1/machines/:id",
      summary: "Remove one of this user's machines",
      description: "Its pairing token stops working at once and its connection is closed. Another user's machine is 404.",
      pathParams: z.object({ id: z.string().min(1).max(64) }),
      responses: { 200: MachineRemoved, ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
  },
  OPTIONS,
);
