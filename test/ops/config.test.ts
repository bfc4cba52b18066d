import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig, baseUrlOf } from "../../server/config.js";

describe("configuration", () => {
  it("defaults to the embedded database in ./.data on port 4000", () => {
    const c = parseConfig({});
    expect(c.port).toBe(4000);
    expect(c.database).toEqual({ kind: "pglite", dataDir: path.resolve(".data", "pglite") });
    expect(baseUrlOf(c, 4000)).toBe("http://127.0.0.1:4000");
  });

  it("switches to Postgres with DATABASE_URL and honours the public URL", () => {
    const c = parseConfig({ DATABASE_URL: "postgres://u@db:5432/svc", PUBLIC_URL: "https://svc.example.com/", PORT: "8080", SVC_DATA_DIR: "/var/svc" });
    expect(c.database).toEqual({ kind: "postgres", url: "postgres://u@db:5432/svc", poolSize: 10 });
    expect(c.dataDir).toBe("/var/svc");
    expect(baseUrlOf(c, 8080)).toBe("https://svc.example.com");
  });

  it("takes a pooler's URL with a direct one beside it, and the pool's size", () => {
    const c = parseConfig({ DATABASE_URL: "postgres://u@pgbouncer:6432/svc", DATABASE_DIRECT_URL: "postgres://u@db:5432/svc", DATABASE_POOL_SIZE: "4" });
    expect(c.database).toEqual({ kind: "postgres", url: "postgres://u@pgbouncer:6432/svc", directUrl: "postgres://u@db:5432/svc", poolSize: 4 });
  });

  it("takes the run bus's NATS URL and stream beside a Postgres; none by default", () => {
    expect(parseConfig({ DATABASE_URL: "postgres://u@db/svc", NATS_URL: "nats://nats:4222", NATS_STREAM: "runs-eu" }).nats).toEqual({ url: "nats://nats:4222", stream: "runs-eu" });
    expect(parseConfig({ DATABASE_URL: "postgres://u@db/svc", NATS_URL: "nats://a:4222,nats://b:4222" }).nats).toEqual({ url: "nats://a:4222,nats://b:4222", stream: "svc_runs" });
    expect(parseConfig({ DATABASE_URL: "postgres://u@db/svc" }).nats).toBeNull();
  });

  it.each([
    [{ PORT: "abc" }, /PORT/],
    [{ PORT: "70000" }, /PORT/],
    [{ DATABASE_URL: "mysql://x" }, /DATABASE_URL.*postgres/],
    [{ DATABASE_DIRECT_URL: "postgres://u@db:5432/svc" }, /DATABASE_DIRECT_URL.*set DATABASE_URL too/],
    [{ DATABASE_URL: "postgres://u@db/svc", DATABASE_POOL_SIZE: "0" }, /DATABASE_POOL_SIZE/],
    [{ NATS_URL: "nats://nats:4222" }, /NATS_URL.*set DATABASE_URL too/],
    [{ DATABASE_URL: "postgres://u@db/svc", NATS_URL: "http://nats:4222" }, /NATS_URL.*nats:\/\//],
    [{ DATABASE_URL: "postgres://u@db/svc", NATS_URL: "nats://n:4222", NATS_STREAM: "a.b" }, /NATS_STREAM/],
    [{ PUBLIC_URL: "not a url" }, /PUBLIC_URL/],
    [{ LOG_LEVEL: "loud" }, /LOG_LEVEL/],
    [{ MAX_BODY_BYTES: "10" }, /MAX_BODY_BYTES/],
    [{ RUN_MACHINE_GRACE_SECONDS: "0" }, /RUN_MACHINE_GRACE_SECONDS/],
    [{ WORKER_HEARTBEAT_TIMEOUT_SECONDS: "46" }, /WORKER_HEARTBEAT_TIMEOUT_SECONDS/],
    [{ WORKER_HEARTBEAT_TIMEOUT_SECONDS: "2" }, /WORKER_HEARTBEAT_TIMEOUT_SECONDS/],
  ])("refuses %o with a message naming the variable", (env, pattern) => {
    expect(() => parseConfig(env)).toThrow(ConfigError);
    expect(() => parseConfig(env)).toThrow(pattern);
  });

  it("a machine's runs wait 5 minutes for it by default; the grace's older name RUN_ORPHAN_SECONDS is read when the new one is unset; the heartbeat timeout is 45 s, shorter on request", () => {
    expect(parseConfig({}).runMachineGraceSeconds).toBe(300);
    expect(parseConfig({ RUN_ORPHAN_SECONDS: "90" }).runMachineGraceSeconds).toBe(90);
    expect(parseConfig({ RUN_ORPHAN_SECONDS: "90", RUN_MACHINE_GRACE_SECONDS: "600" }).runMachineGraceSeconds).toBe(600);
    expect(parseConfig({}).workerHeartbeatTimeoutSeconds).toBe(45);
    expect(parseConfig({ WORKER_HEARTBEAT_TIMEOUT_SECONDS: "10" }).workerHeartbeatTimeoutSeconds).toBe(10);
  });

  it("treats empty values as unset", () => {
    expect(parseConfig({ PORT: "", DATABASE_URL: "" }).database.kind).toBe("pglite");
  });
});
