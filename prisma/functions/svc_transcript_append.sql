-- A run's whole conversation with a step's messages added (`runs.transcript`, kept for a run that has it there, or while
-- an instance of a version before `run_messages` is alive): `p_added` is `[{n, message}]`, message `n` of the run
-- counted from 0, and only those past what `p_base` holds are added (a step written again adds nothing twice).
-- A simple SQL function: Postgres inlines it into the run writer's statement.
CREATE OR REPLACE FUNCTION "svc_transcript_append"(p_base JSONB, p_added JSONB)
RETURNS JSONB LANGUAGE sql IMMUTABLE AS $$
  SELECT COALESCE(p_base, '[]'::jsonb) || COALESCE(
    (SELECT jsonb_agg(t.message ORDER BY t.n) FROM jsonb_to_recordset(p_added) AS t(n int, message jsonb)
      WHERE t.n >= jsonb_array_length(COALESCE(p_base, '[]'::jsonb))),
    '[]'::jsonb)
$$;
