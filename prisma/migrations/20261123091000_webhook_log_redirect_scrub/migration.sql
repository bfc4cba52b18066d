-- The delivery log no longer says where a target redirected, nor which private address a
-- name resolved to (hand-written; issue 14): an app must not learn the service's network
-- through it. Attempts logged before this change lose those parts too.
UPDATE "webhook_attempts" SET "error" = regexp_replace("error", ' \(to .*\)$', '')
 WHERE "error" ~ '^HTTP 3[0-9][0-9]: redirects are not followed \(to ';
UPDATE "webhook_deliveries" SET "last_error" = regexp_replace("last_error", ' \(to .*\)$', '')
 WHERE "last_error" ~ '^HTTP 3[0-9][0-9]: redirects are not followed \(to ';
UPDATE "webhook_attempts" SET "error" = regexp_replace("error", 'resolves to the private address \S+', 'resolves to a private address')
 WHERE "error" LIKE '%resolves to the private address %';
UPDATE "webhook_deliveries" SET "last_error" = regexp_replace("last_error", 'resolves to the private address \S+', 'resolves to a private address')
 WHERE "last_error" LIKE '%resolves to the private address %';
