import { PACKAGE_VERSION } from "./layout.js";

/** How this client names itself to the server (shown on the approve page). */
export const CLIENT_NAME = "svc-worker";
/** Its version, sent in the pairing request and the `hello`: the package's own (worker/package.json). */
export const CLIENT_VERSION = PACKAGE_VERSION;
