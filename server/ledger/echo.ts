import type { RunSource } from "@svc/contract";
import type { Sql } from "../db/open.js";
import { ECHO_MODEL } from "../runs/echo-script.js";
import { costClassOf } from "./metering.js";

/** What one `svc/echo` answer records: its run and its ledger row. */
export interface EchoRecord {
  id: string;
  app_id: string;
  environment: string;
  end_user_id: string;
  output: string;
  input_tokens: number;
  output_tokens: number;
  created_at: string;
  period: string;
  /** The endpoint (`chat` when absent) and what the run keeps of its request (a stored response's input and output). */
  source?: Exclude<RunSource, "runs">;
  request?: unknown;
}

/**
 * Echo answers' runs and ledger rows, written by group commit: the records of
 * requests arriving together go in one statement (both tables), and each
 * request is answered only once its records are committed, so rows and
 * answers stay equal, exactly.
 */
const ECHO_INSERT = `WITH x AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(id text, app_id text, environment text, end_user_id text, output text,
      input_tokens bigint, output_tokens bigint, created_at timestamptz, period text, source text, request jsonb)),
  inserted AS (
    INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, turns, output, input_tokens, output_tokens, last_seq, created_at, finished_at, stop_reason)
    SELECT id, app_id, environment::"Environment", end_user_id, COALESCE(source, 'chat'), $2, COALESCE(request, '{}'::jsonb), 'completed', 1, output, input_tokens, output_tokens, 0, created_at, created_at, 'stop' FROM x
    RETURNING id)
  INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, input_tokens, output_tokens, period, unique_key, created_at)
  SELECT x.app_id, x.environment::"Environment", x.end_user_id, x.id, $3::"CostClass", 'echo', x.input_tokens, x.output_tokens, x.period, 'echo:' || x.id, x.created_at
    FROM x JOIN inserted i ON i.id = x.id`;

/** Writes the runs and ledger rows of echo answers arriving together, in one statement (the chat endpoint's group commit calls it). */
export async function recordEchoes(db: Sql, records: EchoRecord[]): Promise<void> {
  await db.query(ECHO_INSERT, [JSON.stringify(records), ECHO_MODEL, costClassOf("service")]);
}
