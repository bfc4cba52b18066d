// on-headers 1.1 ships no types (its @types package lags): the one call this service makes.
declare module "on-headers" {
  import type { ServerResponse } from "node:http";
  function onHeaders(res: ServerResponse, listener: (this: ServerResponse) => void): void;
  export default onHeaders;
}
