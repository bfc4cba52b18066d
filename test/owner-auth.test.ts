import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASES } from "./helpers/databases.js";
import { startTestServerOn, type TestServer } from "./helpers/server.js";
import { signInOwner } from "./helpers/owner.js";
import { expectError } from "./helpers/requests.js";

describe.each(DATABASES)("owner auth core on $db.name", ({ db, skip }) => {
  let server: TestServer;
  beforeAll(async () => {
    if (skip) return;
    server = await startTestServerOn(db);
  });
  afterAll(async () => {
    await server?.close();
  });

  it.skipIf(skip)("signs in with a link and reads /v1/owner/me", async () => {
    const o = await signInOwner(server);
    const res = await o.fetch("/v1/owner/me");
    const me = await res.json();
    expect(res.status, JSON.stringify(me)).toBe(200);
    expect(me.apps.map((a: { id: string }) => a.id)).toEqual([server.dev.appId]);
    expect(me.csrfToken).toBe(o.csrf);
    await expectError(await o.fetch("/v1/owner/sign_out", { method: "POST", headers: { "x-csrf-token": "wrong" } }), 403, "forbidden");
    await expectError(await server.fetch("/v1/owner/me"), 401, "missing_credential");
  });
});
