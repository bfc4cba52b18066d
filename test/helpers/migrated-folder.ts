import path from "node:path";
import { pgliteTemplate } from "./databases.js";
import { tempDir } from "./process.js";
import { copyPgliteTemplate } from "./templates.js";

/**
 * A server's data folder (removed with the other temp folders) whose embedded database is
 * already migrated: a copy of the migrated PGlite template in `<folder>/pglite`, where the
 * server and the CLI look. Creating and migrating a PGlite database costs a server process
 * or a CLI command about 10 s of CPU; a suite that is not about that first start skips it.
 * The database is as a first start leaves it before the development app: no apps.
 */
export function migratedTempDir(prefix: string): string {
  const dir = tempDir(prefix);
  copyPgliteTemplate(pgliteTemplate, path.join(dir, "pglite"));
  return dir;
}
