import fs from "node:fs";
import path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Starts the longest test files first, so the run does not end with one long
 * file going on alone while the other workers are idle. Vitest orders by the
 * durations of its last run on this machine, which a fresh clone (CI) does not
 * have: there it would order by file size. The durations of a full CI run are
 * kept in test/durations.json (scripts/test-durations.mjs writes them); a file
 * not listed there (a new one) goes first, as vitest runs unknown files first.
 */
export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const known = JSON.parse(fs.readFileSync(path.join(root, "test", "durations.json"), "utf8")) as Record<string, number>;
    const seconds = (f: TestSpecification) => known[path.relative(root, f.moduleId).split(path.sep).join("/")] ?? Infinity;
    const base = await super.sort(files);
    return base.map((f, i) => ({ f, i, s: seconds(f) })).sort((a, b) => b.s - a.s || a.i - b.i).map(({ f }) => f);
  }
}
