import fs from "node:fs";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { workerMessage } from "@svc/contract";
import { JobLog } from "../../worker/src/job-log.js";
import { removeTempDirs, tempDir } from "../helpers/process.js";

afterAll(() => removeTempDirs());

/** A numbered job event's frame, as the worker sends it. */
const frame = (n: number, text = `piece ${n} `) => JSON.stringify(workerMessage("job_event", { jobId: "job_x", n, event: { type: "text_delta", text } }));

it("keeps the unacknowledged events: the newest in memory, older ones spilled in order to a file of the worker's folder, all of them given back after a point", () => {
  const dir = tempDir("svc-joblog-");
  const log = new JobLog(dir, "job_x", { memoryBytes: 1000, fileBytes: 1_000_000 });
  for (let n = 1; n <= 100; n++) expect(log.append(n, frame(n))).toBe(true);
  expect(log.size.memory).toBeLessThanOrEqual(1000);
  expect(log.size.file).toBeGreaterThan(0);
  const file = path.join(dir, "job_x.events");
  expect(fs.existsSync(file)).toBe(true);
  // Everything after 40, in order, from the file then memory.
  const after40 = log.since(40)!.map((f) => (JSON.parse(f) as { payload: { n: number } }).payload.n);
  expect(after40).toEqual(Array.from({ length: 60 }, (_, i) => 41 + i));
  expect(log.since(0)).toHaveLength(100);
  // Acknowledged up to 50: asking for less than what was acknowledged cannot be answered exactly.
  log.ack(50);
  expect(log.since(49)).toBeNull();
  expect(log.since(50)).toHaveLength(50);
  // Acknowledged past everything in the file: the file goes.
  log.ack(99);
  expect(fs.existsSync(file)).toBe(false);
  expect(log.since(99)!.map((f) => (JSON.parse(f) as { payload: { n: number } }).payload.n)).toEqual([100]);
  log.close();
  expect(log.size).toEqual({ memory: 0, file: 0 });
});

it("says it is full past its file bound (the job can no longer be resumed exactly), and forgets its file on close", () => {
  const dir = tempDir("svc-joblog-");
  const log = new JobLog(dir, "job_x", { memoryBytes: 200, fileBytes: 2000 });
  let n = 0;
  let ok = true;
  while (ok && n < 10_000) ok = log.append(++n, frame(n));
  expect(ok).toBe(false);
  // Positive control: it took events until the bound, then refused.
  expect(n).toBeGreaterThan(10);
  expect(log.size.file).toBeLessThanOrEqual(2000);
  log.close();
  expect(fs.readdirSync(dir)).toEqual([]);
});
