export * from "./errors.js";
export * from "./credentials.js";
export * from "./common.js";
export * from "./runs.js";
export * from "./chat.js";
export * from "./pairing.js";
export * from "./sessions.js";
export * from "./reads.js";
export { contract, type Contract } from "./router.js";
