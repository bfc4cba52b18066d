/**
 * The model stand-in of the tests (test/helpers/standins.ts) in a process of its
 * own, so the baseline and the service path call the same local model server and
 * neither pays for its CPU inside the bench process. Prints its URL, then serves
 * until it is sent SIGTERM.
 */
import { startModelStandIn } from "../test/helpers/standins.js";

const model = await startModelStandIn();
process.stdout.write(`${model.url}\n`);
setInterval(() => (model.requests.length = 0), 1000).unref();
process.on("SIGTERM", () => void model.close().finally(() => process.exit(0)));
