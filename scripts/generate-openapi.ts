// Writes openapi.json from the contract. `npm run openapi`; a test fails when the committed file is stale.
import fs from "node:fs";
import { openApiJson } from "../server/openapi.js";

fs.writeFileSync(new URL("../openapi.json", import.meta.url), openApiJson());
process.stdout.write("openapi.json written\n");
