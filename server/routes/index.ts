import type { AppRoute } from "@ts-rest/core";
import type { createExpressEndpoints } from "@ts-rest/express";
import { contract, type Contract } from "@svc/contract";
import { notBuilt } from "./not-built.js";

type RouterImplementation = Parameters<typeof createExpressEndpoints<Contract>>[1];

/**
 * The implementation of every contract route. Routes not built yet answer 501;
 * each later feature replaces its entries with real handlers.
 */
export function routes(): RouterImplementation {
  const all = Object.fromEntries(
    Object.entries(contract).map(([name, route]) => [name, notBuilt(route as AppRoute)]),
  );
  return all as unknown as RouterImplementation;
}
