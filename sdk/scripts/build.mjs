// Builds the publishable SDK into dist/: one ES module with the contract's runtime pieces
// (the run-event and error-envelope schemas) bundled in, and one declaration file of the
// public types. Only zod and eventsource-parser stay imports: the package's dependencies.
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import * as esbuild from "esbuild";
import { rollup } from "rollup";
import { dts } from "rollup-plugin-dts";

const sdk = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const pkg = JSON.parse(fs.readFileSync(path.join(sdk, "package.json"), "utf8"));
const external = Object.keys(pkg.dependencies ?? {});
const dist = path.join(sdk, "dist");
const work = path.join(sdk, "build");
fs.rmSync(dist, { recursive: true, force: true });
// `build/` is kept between builds: tsc builds the declarations incrementally there (its
// tsbuildinfo beside them), so a pack after a small change rechecks only what changed.

// 1. The code. The contract is read from its sources (the `svc-source` condition) and
// taken as free of side effects, so only what the SDK uses of it is kept (not its router,
// nor ts-rest).
const contractSide = {
  name: "contract-side-effect-free",
  setup(build) {
    build.onResolve({ filter: /^@svc\/contract$/ }, async (args) => {
      if (args.pluginData === "inner") return undefined;
      const r = await build.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, pluginData: "inner" });
      return { ...r, sideEffects: false };
    });
    build.onResolve({ filter: /^\.\.?\// }, async (args) => {
      if (args.pluginData === "inner" || !args.importer.includes(`${path.sep}contract${path.sep}src${path.sep}`)) return undefined;
      const r = await build.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, pluginData: "inner" });
      return { ...r, sideEffects: false };
    });
  },
};
const built = await esbuild.build({
  entryPoints: [path.join(sdk, "src/index.ts")],
  outfile: path.join(dist, "index.js"),
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  conditions: ["svc-source"],
  mainFields: ["module", "main"],
  external,
  plugins: [contractSide],
  metafile: true,
  legalComments: "inline",
  banner: { js: `// ${pkg.name} ${pkg.version}` },
  logLevel: "warning",
});
const imports = new Set(Object.values(built.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external).map((i) => i.path)));
const stray = [...imports].filter((i) => !external.some((d) => i === d || i.startsWith(`${d}/`)));
if (stray.length) throw new Error(`dist/index.js imports what is not a dependency: ${stray.join(", ")}`);

// 2. The declarations: tsc writes them for the sources, rollup-plugin-dts keeps only the
// public surface in one file. Nothing of zod, ts-rest or the contract may be left in it.
const require = createRequire(import.meta.url);
const tsc = require.resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", path.join(sdk, "tsconfig.build.json")], { stdio: "inherit" });
const entry = path.join(work, "dts/index.d.ts");
if (!fs.existsSync(entry)) throw new Error("tsc wrote no index.d.ts");
const bundle = await rollup({ input: entry, plugins: [dts({ respectExternal: true })], external: (id) => !id.startsWith(".") && !path.isAbsolute(id) });
await bundle.write({ file: path.join(dist, "index.d.ts"), format: "es" });
await bundle.close();
const declarations = fs.readFileSync(path.join(dist, "index.d.ts"), "utf8");
const leaked = [...declarations.matchAll(/(?:from|import\()\s*["']([^"']+)["']/g)].map((m) => m[1]);
if (leaked.length) throw new Error(`dist/index.d.ts still imports ${[...new Set(leaked)].join(", ")}`);

const size = (f) => `${(fs.statSync(path.join(dist, f)).size / 1024).toFixed(1)} KiB`;
console.log(`built ${pkg.name} ${pkg.version}: dist/index.js ${size("index.js")}, dist/index.d.ts ${size("index.d.ts")}`);
