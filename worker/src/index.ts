export { pair, type PairOptions, type PairResult } from "./pair.js";
export { Store, configDir, type Credentials, type Settings } from "./store.js";
