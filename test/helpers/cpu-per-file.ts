import { appendFileSync, readFileSync } from "node:fs";
import { afterAll, expect } from "vitest";

/**
 * SVC_TEST_CPU_LOG=<file> (vitest.config.ts): each test file's process appends the CPU it spent, its own and its
 * reaped children's (server, worker and CLI processes, Chromium), in seconds, as one JSON line. Postgres's and NATS's
 * CPU is not in it (they are not its children). The run is bound by the CPU (test/README.md): this says where it goes.
 */
const seconds = () => {
  // /proc/self/stat after the command's name: state is field 0; utime, stime, cutime, cstime are 11-14 (clock ticks).
  const f = readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ").map(Number);
  return { self: (f[11]! + f[12]!) / 100, children: (f[13]! + f[14]!) / 100 };
};

// vitest runs the after-all hooks last-registered first (sequence.hooks "stack"): this one, registered before the
// file's own, runs after them, so the children the file's hooks stopped are counted.
afterAll(() => {
  const file = (expect.getState().testPath ?? "").replace(`${process.cwd()}/`, "");
  appendFileSync(process.env.SVC_TEST_CPU_LOG!, `${JSON.stringify({ file, ...seconds() })}\n`);
});
