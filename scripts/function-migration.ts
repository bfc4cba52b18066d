// Writes a migration that (re)defines SQL functions from their one source each,
// prisma/functions/<name>.sql, in the order given (a function before those calling it).
//   npm run migration:function -- <function> [<function>...] [--name <migration name>]
// The migration says it was generated and from which files; never edit it by hand:
// change the source file and generate a new migration (see prisma/functions/README.md).
import fs from "node:fs";
import path from "node:path";
import { FUNCTIONS_DIR, functionMigration } from "../server/db/functions.js";
import { writeMigration } from "./write-migration.js";

const args = process.argv.slice(2);
const at = args.indexOf("--name");
const name = at >= 0 ? args.splice(at, 2)[1] : undefined;
const functions = args;
const usage = "usage: npm run migration:function -- <function> [<function>...] [--name <migration name in snake_case>]\n";
if (functions.length === 0 || (name !== undefined && !/^[a-z0-9_]+$/.test(name))) {
  process.stderr.write(usage);
  process.exit(2);
}
for (const f of functions) {
  if (!fs.existsSync(path.join(FUNCTIONS_DIR, `${f}.sql`))) {
    process.stderr.write(`No prisma/functions/${f}.sql.\n${usage}`);
    process.exit(2);
  }
}
writeMigration(name ?? `function_${functions.join("_")}`.slice(0, 80), functionMigration(functions));
