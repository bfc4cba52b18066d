import type { AppRoute } from "@ts-rest/core";
import type { RouteMetadata } from "@svc/contract";
import { ApiError } from "../errors.js";

/** The handler of a route a later issue builds: 501 `not_implemented`, saying so. Never a fake success. */
export function notBuilt(route: AppRoute) {
  const meta = route.metadata as RouteMetadata;
  return async (): Promise<never> => {
    throw new ApiError(
      "not_implemented",
      `${route.method} ${route.path} is not built yet${meta.notBuiltYet ? ` (${meta.notBuiltYet})` : ""}.`,
    );
  };
}
