CREATE OR REPLACE FUNCTION "usage_rows_append_only"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'usage_rows is append-only: % refused (write a correction row instead)', TG_OP
    USING ERRCODE = 'restrict_violation';
END;
$$;
