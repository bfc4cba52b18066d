/** How this client names itself to the server (shown on the approve page). */
export const CLIENT_NAME = "svc-worker";
export const CLIENT_VERSION = "0.1.0";
