// What OpenAPI consumers run on openapi.json, from test/tools (kept out of the service's install; both want
// Node 22 or later): test/platform/openapi-client.test.ts runs them in a child process.
//   node test/tools/openapi-consumers.mjs validate <openapi.json>        swagger-parser: {"openapi", "paths"} or {"error"}
//   node test/tools/openapi-consumers.mjs hey-api <openapi.json> <dir>   @hey-api/openapi-ts with its fetch client into <dir>
import SwaggerParser from "@apidevtools/swagger-parser";
import { createClient } from "@hey-api/openapi-ts";

const [command, input, output] = process.argv.slice(2);
if (command === "validate") {
  try {
    const api = await SwaggerParser.validate(input);
    process.stdout.write(`${JSON.stringify({ openapi: api.openapi, paths: Object.keys(api.paths ?? {}).length })}\n`);
  } catch (err) {
    process.stdout.write(`${JSON.stringify({ error: err.message })}\n`);
  }
} else if (command === "hey-api") {
  await createClient({ input, output, plugins: ["@hey-api/client-fetch"], logs: { level: "silent" } });
  process.stdout.write(`${JSON.stringify({ generated: output })}\n`);
} else {
  process.stderr.write("usage: openapi-consumers.mjs validate <doc> | hey-api <doc> <dir>\n");
  process.exit(2);
}
