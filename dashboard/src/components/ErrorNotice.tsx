import { ApiFailure } from "../api/client";

/** A failure in words, with the request id to quote to support. */
export function ErrorNotice({ error, title }: { error: unknown; title?: string }) {
  if (!error) return null;
  const failure = error instanceof ApiFailure ? error : null;
  return (
    <div role="alert" className="notice notice-error">
      {title && <strong>{title} </strong>}
      {failure ? failure.message : error instanceof Error ? error.message : String(error)}
      {failure?.requestId && <span className="muted"> (request {failure.requestId})</span>}
    </div>
  );
}
