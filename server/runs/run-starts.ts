import type { Database } from "../db/open.js";
import { KeyedGroupCommit } from "../db/group-commit.js";
import { startRun, startRuns, type StartRunArgs, type StartRunOutcome } from "../ledger/functions.js";

/** The most starts one statement carries. */
const MAX_BATCH = 64;

/**
 * Runs' starts by group commit: starts that arrive while one is in flight wait and go together in
 * the next statement (`svc_start_runs`), each decided as it would be alone, in the order they came.
 * A start takes its user's row for the plan's and slots' counts, so one user's starts went one at a
 * time anyway, each statement waiting for the one before it to commit (on Postgres, each holding
 * a pooled connection while it waited); now a burst of one user's starts is a few statements.
 *
 * On Postgres a statement carries one user's starts (a statement locking several users' rows
 * could deadlock with another doing the same in another order), and different users' statements
 * go side by side. On PGlite, one connection runs one statement at a time: every waiting start
 * goes in the next one, whoever its user.
 */
export class RunStarts {
  private readonly groups: KeyedGroupCommit<StartRunArgs, StartRunOutcome>;

  constructor(private readonly db: Database) {
    this.groups = new KeyedGroupCommit((starts) => (starts.length === 1 ? startRun(db, starts[0]).then((r) => [r]) : startRuns(db, starts)), MAX_BATCH);
  }

  start(a: StartRunArgs): Promise<StartRunOutcome> {
    return this.groups.add(this.db.kind === "postgres" ? a.endUserId : "", a);
  }
}
