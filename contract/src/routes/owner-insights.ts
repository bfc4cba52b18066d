import { OwnerApiRequestPage, OwnerApiRequestQuery, OwnerOverview } from "../owner-insights.js";
import { EnvParam } from "../owner.js";
import { c, ENV, OPTIONS, ownerErrors, signedIn } from "./shared.js";

/** One app environment at a glance, and the app's API requests. */
export const ownerInsightsContract = c.router(
  {
    ownerOverview: {
      method: "GET",
      path: `${ENV}/overview`,
      summary: "The environment at a glance",
      description: "Runs, spend, users, machines, API requests and webhook deliveries: today, this month and now.",
      pathParams: EnvParam,
      responses: { 200: OwnerOverview, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListApiRequests: {
      method: "GET",
      path: `${ENV}/requests`,
      summary: "The app's API requests",
      description:
        "Requests made with the environment's app keys, newest first: method, path (never its query string, headers or body), status, error code, duration and key. Kept `REQUEST_LOG_RETENTION_DAYS` (default 14); written within about a second of the answer.",
      pathParams: EnvParam,
      query: OwnerApiRequestQuery,
      responses: { 200: OwnerApiRequestPage, ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);
