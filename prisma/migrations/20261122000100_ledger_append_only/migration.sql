-- The ledger is append-only: a correction is a new row, never an UPDATE or a DELETE.
-- Prisma's datamodel cannot express triggers; this migration is hand-written.
CREATE FUNCTION "usage_rows_append_only"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'usage_rows is append-only: % refused (write a correction row instead)', TG_OP
    USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER "usage_rows_no_update_delete"
  BEFORE UPDATE OR DELETE ON "usage_rows"
  FOR EACH ROW EXECUTE FUNCTION "usage_rows_append_only"();

CREATE TRIGGER "usage_rows_no_truncate"
  BEFORE TRUNCATE ON "usage_rows"
  FOR EACH STATEMENT EXECUTE FUNCTION "usage_rows_append_only"();
