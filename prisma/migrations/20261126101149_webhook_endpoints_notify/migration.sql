-- Every change of a tenant's webhook endpoints is announced (webhook_endpoints_changed): instances drop what they keep of them.
CREATE TRIGGER "webhook_endpoints_notify"
  AFTER INSERT OR UPDATE OR DELETE ON "webhook_endpoints"
  FOR EACH ROW EXECUTE FUNCTION "webhook_endpoints_changed"();

CREATE TRIGGER "webhook_endpoints_notify_truncate"
  AFTER TRUNCATE ON "webhook_endpoints"
  FOR EACH STATEMENT EXECUTE FUNCTION "webhook_endpoints_changed"();
