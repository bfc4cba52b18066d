import type { Request } from "express";
import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { sessionOf, tenantOf } from "../http/principal.js";
import { addressKey } from "../rate-limit/client-address.js";

const s = initServer();

/** The client's address for per-address rate limits (behind proxies as `TRUST_PROXY` says). */
const addressOf = (req: Request) => addressKey(req.ip ?? req.socket.remoteAddress ?? "unknown");

/** RFC 8628 pairing: the worker's two calls (7, 8) and the connect page's (11-14). */
export function pairingRoutes({ deviceFlow }: RouteServices) {
  return {
    requestDeviceCode: s.route(contract.requestDeviceCode, async ({ req, params, body }) => ({
      status: 200,
      body: await deviceFlow.requestCode(tenantOf(req), params.pk, body, addressOf(req)),
    })),
    pollDeviceToken: s.route(contract.pollDeviceToken, async ({ req, body }) => ({
      status: 200,
      body: await deviceFlow.pollToken(body.device_code, tenantOf(req)),
    })),
    pollDeviceTokenAlias: s.route(contract.pollDeviceTokenAlias, async ({ body }) => ({
      status: 200,
      body: await deviceFlow.pollToken(body.device_code, null),
    })),
    getConnectInfo: s.route(contract.getConnectInfo, async ({ req }) => ({
      status: 200,
      body: await deviceFlow.connectInfo(sessionOf(req)),
    })),
    lookupDevice: s.route(contract.lookupDevice, async ({ req, query }) => ({
      status: 200,
      body: await deviceFlow.lookup(sessionOf(req), query.code, addressOf(req)),
    })),
    approveDevice: s.route(contract.approveDevice, async ({ req, body }) => ({
      status: 200,
      body: await deviceFlow.answer(sessionOf(req), body.user_code, addressOf(req), "approve"),
    })),
    denyDevice: s.route(contract.denyDevice, async ({ req, body }) => ({
      status: 200,
      body: await deviceFlow.answer(sessionOf(req), body.user_code, addressOf(req), "deny"),
    })),
  };
}
