import fs from "node:fs";
import path from "node:path";
import ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";

/**
 * No cast to `never` or `any` in the service, the contract or the SDK: such a cast
 * silences the checker instead of typing what is there (issue 54). Found in the
 * syntax tree (`x as any`, `<never>x`), so prose in comments and strings is not one.
 */
const SCANNED = ["server", "contract", "sdk/src"];
/** Not ours to type (Prisma's generated client), or not sources. */
const SKIPPED = new Set([path.join("server", "db", "generated"), "node_modules", "dist"]);
const SOURCE = /\.(c|m)?tsx?$/;

function sourceFiles(dir: string, root: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    const rel = path.relative(root, full);
    if (SKIPPED.has(entry.name) || SKIPPED.has(rel)) continue;
    if (entry.isDirectory()) out.push(...sourceFiles(full, root));
    else if (entry.isFile() && SOURCE.test(entry.name)) out.push(full);
  }
  return out;
}

/** Each cast to `never` or `any` under `root`'s `dirs`: `file:line: as any`, the file relative to `root`. */
function castsUnder(root: string, dirs: string[]): string[] {
  const found: string[] = [];
  for (const dir of dirs) {
    const start = path.join(root, dir);
    if (!fs.existsSync(start)) continue;
    for (const file of sourceFiles(start, root)) {
      const text = fs.readFileSync(file, "utf8");
      const kind = file.endsWith("x") ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
      const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
      const visit = (node: ts.Node): void => {
        if ((ts.isAsExpression(node) || ts.isTypeAssertionExpression(node)) && (node.type.kind === ts.SyntaxKind.AnyKeyword || node.type.kind === ts.SyntaxKind.NeverKeyword)) {
          const line = source.getLineAndCharacterOfPosition(node.type.getStart(source)).line + 1;
          found.push(`${path.relative(root, file).split(path.sep).join("/")}:${line}: ${ts.isAsExpression(node) ? `as ${node.type.getText(source)}` : `<${node.type.getText(source)}>`}`);
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
  }
  return found;
}

describe("type safety", () => {
  afterAll(() => removeTempDirs());

  it("has no cast to never or any in server/, contract/ or sdk/src (each one named file:line)", () => {
    expect(castsUnder(ROOT, SCANNED), "type what is there instead of casting it to never or any").toEqual([]);
  });

  it("finds a cast planted in a file, and not the words in comments or strings", () => {
    const root = tempDir("svc-type-safety-");
    fs.mkdirSync(path.join(root, "server", "db", "generated"), { recursive: true });
    fs.mkdirSync(path.join(root, "server", "deep"), { recursive: true });
    fs.writeFileSync(
      path.join(root, "server", "deep", "planted.ts"),
      [
        "// as any run would: prose, not a cast",
        'const said = "as never";',
        "export const a = (said as any).length;",
        "export const b = <never>said;",
        "export const c = said as unknown as never;",
        "export const d = said as string;",
      ].join("\n"),
    );
    fs.writeFileSync(path.join(root, "server", "db", "generated", "client.ts"), "export const g = 1 as any;\n");
    expect(castsUnder(root, SCANNED)).toEqual(["server/deep/planted.ts:3: as any", "server/deep/planted.ts:4: <never>", "server/deep/planted.ts:5: as never"]);
  });
});
