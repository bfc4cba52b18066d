import { runningContract } from "./routes/running.js";
import { responsesContract } from "./routes/responses.js";
import { pairingContract } from "./routes/pairing.js";
import { ledgerContract } from "./routes/ledger.js";
import { billingContract } from "./routes/billing.js";
import { ownerContract, type OwnerContract } from "./owner-router.js";

export { runningContract, responsesContract, pairingContract, ledgerContract, billingContract };

// The contract is declared in parts, each its own file under routes/ and its own type: one
// object literal of every route makes a type the declaration emitter refuses to write out
// (TS7056) when the packages are built (`npm pack`). `contract` is their union, key order
// kept (it is the order of openapi.json); the app owner's routes (the dashboard) are
// combined in owner-router.ts.

export const contract: typeof runningContract & typeof responsesContract & typeof pairingContract & typeof ledgerContract & typeof billingContract & OwnerContract = {
  ...runningContract,
  ...responsesContract,
  ...pairingContract,
  ...ledgerContract,
  ...billingContract,
  ...ownerContract,
};

export type Contract = typeof contract;
