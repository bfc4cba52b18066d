import { ownerAccountContract } from "./routes/owner-account.js";
import { ownerUsageContract } from "./routes/owner-usage.js";
import { ownerSettingsContract } from "./routes/owner-settings.js";

export { ownerAccountContract, ownerUsageContract, ownerSettingsContract };

// The owner's routes in three parts, each its own file under routes/ and its own type (as one
// object literal their type is more than the declaration emitter writes out: TS7056 when the
// package is built), combined here in this order.

/** One app environment's users, usage, runs, plans, billing, conversions and webhooks. */
export const ownerDataContract: typeof ownerUsageContract & typeof ownerSettingsContract = { ...ownerUsageContract, ...ownerSettingsContract };

export const ownerContract: typeof ownerAccountContract & typeof ownerDataContract = { ...ownerAccountContract, ...ownerDataContract };
export type OwnerContract = typeof ownerContract;
