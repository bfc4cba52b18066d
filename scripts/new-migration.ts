// Authors a migration: the SQL that takes the schema committed at HEAD to the
// working tree's prisma/schema.prisma (from nothing when no migration exists yet),
// through `prisma migrate diff` on datamodels (works offline, no database).
//   npm run migration:new -- <name>
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { readMigrations } from "../server/db/migrate.js";
import { writeMigration } from "./write-migration.js";

const name = process.argv[2];
if (!name || !/^[a-z0-9_]+$/.test(name)) {
  process.stderr.write("usage: npm run migration:new -- <name in snake_case>\n");
  process.exit(2);
}
const from = readMigrations().length === 0 ? ["--from-empty"] : (() => {
  const previous = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "svc-schema-")), "schema.prisma");
  fs.writeFileSync(previous, execFileSync("git", ["show", "HEAD:prisma/schema.prisma"]));
  return ["--from-schema-datamodel", previous];
})();
const sql = execFileSync("npx", ["prisma", "migrate", "diff", ...from, "--to-schema-datamodel", "prisma/schema.prisma", "--script"], {
  encoding: "utf8",
  stdio: ["ignore", "pipe", "inherit"],
});
if (!/\S/.test(sql.replace(/^--.*$/gm, ""))) {
  process.stdout.write("No schema change since HEAD: no migration written.\n");
  process.exit(0);
}
writeMigration(name, sql);
