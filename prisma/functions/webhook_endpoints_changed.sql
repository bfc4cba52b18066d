-- Tells every instance (LISTEN svc_webhook_endpoints) that a tenant's webhook endpoints changed, whoever wrote
-- them: each instance keeps which event types a tenant's endpoints want (server/webhooks/interest.ts).
-- Payload: `<app id> <environment>`, or `*` (a TRUNCATE: every tenant).
CREATE OR REPLACE FUNCTION "webhook_endpoints_changed"()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    PERFORM pg_notify('svc_webhook_endpoints', '*');
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('svc_webhook_endpoints', OLD.app_id || ' ' || OLD.environment::text);
  ELSE
    PERFORM pg_notify('svc_webhook_endpoints', NEW.app_id || ' ' || NEW.environment::text);
  END IF;
  RETURN NULL;
END;
$$;
