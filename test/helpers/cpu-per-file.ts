import { afterAll, expect } from "vitest";
import { appendFileSync, readFileSync } from "node:fs";
const ticks = () => {
  const f = readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ");
  // fields after comm: index 11..14 = utime stime cutime cstime (state is index 0)
  return { self: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]) };
};
afterAll(() => {
  const t = ticks();
  appendFileSync(process.env.SVC_TEST_CPU_LOG!, JSON.stringify({ file: expect.getState().testPath, self: t.self / 100, children: t.children / 100 }) + "\n");
});
