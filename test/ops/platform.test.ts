import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/process.js";

/**
 * The Node the service runs on is the one the project brings (the `node` package, issue 30): `npm test`
 * and `npm start` run on it whatever Node the machine has, and CI proves the suite there.
 */
describe("the platform", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")) as { dependencies: Record<string, string>; engines: { node: string } };

  it("the project brings Node 24 LTS, and npm run puts it first on the PATH", () => {
    expect(pkg.dependencies.node).toMatch(/^24\.\d+\.\d+$/);
    const bin = path.join(ROOT, "node_modules", ".bin", "node");
    expect(fs.existsSync(bin)).toBe(true);
  });

  it.runIf(process.env.npm_lifecycle_event === "test" || process.env.CI)("the suite runs on exactly that Node (npm test, CI)", () => {
    expect(process.version).toBe(`v${pkg.dependencies.node}`);
  });
});
