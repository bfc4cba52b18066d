import fs from "node:fs";
import { afterAll, afterEach } from "vitest";
import { openApiCheck, takeMismatches } from "./openapi-check.js";

/**
 * In every test file: a test during which an in-process server answered anything openapi.json
 * does not declare fails (test/helpers/openapi-check.ts). At the end of the file, what was
 * checked is added up in SVC_OPENAPI_CHECK_LOG (the totals reporter prints the sum).
 */
afterEach(() => {
  const failed = takeMismatches(openApiCheck.peek());
  if (failed) throw failed;
});

afterAll(() => {
  const check = openApiCheck.peek();
  const log = process.env.SVC_OPENAPI_CHECK_LOG;
  if (check && log) fs.appendFileSync(log, `${JSON.stringify(check.counts)}\n`);
});
