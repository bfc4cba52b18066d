import http from "node:http";
import net from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { discoverRuntimes } from "../../worker/src/runtimes/discover.js";
import type { Settings } from "../../worker/src/store.js";

/**
 * A worker's look for model servers at its start, against real HTTP servers: one that
 * answers late the first time (a machine busy as the worker starts), one that never
 * answers, and a port where nothing listens.
 */

const models = JSON.stringify({ object: "list", data: [{ id: "m1", object: "model" }] });

/** A model server whose answers to `/v1/models` wait `delays[i]` ms (the last delay for the rest); -1: never answers. */
async function modelServer(delays: number[]): Promise<{ url: string; asked: () => number; close: () => Promise<void> }> {
  let asked = 0;
  const server = http.createServer((req, res) => {
    const delay = delays[Math.min(asked++, delays.length - 1)];
    if (delay < 0) return; // holds the request
    setTimeout(() => res.writeHead(200, { "content-type": "application/json" }).end(models), delay);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    asked: () => asked,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

const settingsFor = (openai: { name: string; url: string }[]): Settings => ({ runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false, openai } }) as Settings;

describe("finding model servers at the worker's start", () => {
  let late: Awaited<ReturnType<typeof modelServer>>;
  let silent: Awaited<ReturnType<typeof modelServer>>;
  let nobody: string;

  beforeAll(async () => {
    late = await modelServer([2_500, 0]);
    silent = await modelServer([-1]);
    // A port that was just free: nothing listens there.
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", () => r()));
    nobody = `http://127.0.0.1:${(probe.address() as AddressInfo).port}`;
    await new Promise<void>((r) => probe.close(() => r()));
  });
  afterAll(async () => {
    await late?.close();
    await silent?.close();
  });

  it("a server that answers past the first wait (1.5 s) is asked once more, and its models are served", async () => {
    const found = await discoverRuntimes(settingsFor([{ name: "late", url: late.url }]));
    expect(found.runtimes.map((r) => [r.advert.name, r.advert.models])).toEqual([["openai-compatible:late", ["m1"]]]);
    expect(late.asked()).toBe(2);
  });

  it("nothing listening is known at once, without a second wait; a server that never answers is given up after both", async () => {
    const t0 = Date.now();
    const none = await discoverRuntimes(settingsFor([{ name: "nobody", url: nobody }]));
    expect(Date.now() - t0).toBeLessThan(1_500);
    expect(none.runtimes).toEqual([]);
    expect(none.notes.join("\n")).toMatch(/openai-compatible:nobody: nothing at/);

    const t1 = Date.now();
    const mute = await discoverRuntimes(settingsFor([{ name: "mute", url: silent.url }]));
    expect(Date.now() - t1).toBeGreaterThanOrEqual(6_000);
    expect(mute.runtimes).toEqual([]);
    expect(mute.notes.join("\n")).toMatch(/openai-compatible:mute: nothing at/);
    expect(silent.asked()).toBe(2);
  }, 20_000);
});
