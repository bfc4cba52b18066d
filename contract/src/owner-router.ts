import { ownerAccountContract } from "./routes/owner-account.js";
import { ownerAppsContract } from "./routes/owner-apps.js";
import { ownerUsageContract } from "./routes/owner-usage.js";
import { ownerSettingsContract } from "./routes/owner-settings.js";
import { ownerInsightsContract } from "./routes/owner-insights.js";

export { ownerAccountContract, ownerAppsContract, ownerUsageContract, ownerSettingsContract, ownerInsightsContract };

// The owner's routes in five parts, each its own file under routes/ and its own type (as one
// object literal their type is more than the declaration emitter writes out: TS7056 when the
// package is built), combined here in this order.

/** One app environment's overview, users, usage, runs, API requests, plans, billing, conversions and webhooks. */
export const ownerDataContract: typeof ownerUsageContract & typeof ownerSettingsContract & typeof ownerInsightsContract = { ...ownerUsageContract, ...ownerSettingsContract, ...ownerInsightsContract };

export const ownerContract: typeof ownerAccountContract & typeof ownerAppsContract & typeof ownerDataContract = { ...ownerAccountContract, ...ownerAppsContract, ...ownerDataContract };
export type OwnerContract = typeof ownerContract;
