import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { SESSION_TTL_SECONDS } from "../sessions/sessions.js";
import { sessionOf, tenantOf } from "../http/principal.js";

const s = initServer();

/** End-user sessions (9, 10) and what a session reads about its own user (15). */
export function sessionRoutes({ sessions, machines, urls }: RouteServices) {
  return {
    createSession: s.route(contract.createSession, async ({ req, body }) => {
      const { token } = await sessions.mint(tenantOf(req), body.user, body.email);
      // The token rides in the fragment: browsers never send it to a server, so no access log or Referer carries it.
      return { status: 200, body: { session: token, expires_in: SESSION_TTL_SECONDS, url: `${urls.connectPage}#session=${token}`, billing_url: `${urls.billingPage}#session=${token}` } };
    }),
    endSessions: s.route(contract.endSessions, async ({ req, query }) => ({
      status: 200,
      body: { user: query.user, ended: await sessions.endAll(tenantOf(req), query.user) },
    })),
    listMachines: s.route(contract.listMachines, async ({ req }) => {
      const session = sessionOf(req);
      return { status: 200, body: { data: await machines.listForUser(session, session.endUserId) } };
    }),
    removeMachine: s.route(contract.removeMachine, async ({ req, params }) => {
      const session = sessionOf(req);
      return { status: 200, body: await machines.revoke(session, session.endUserId, params.id) };
    }),
  };
}
