import { useState } from "react";

/** A secret the service will never show again: copy it now. */
export function SecretOnce({ label, secret, onDismiss }: { label: string; secret: string; onDismiss: () => void }) {
  const [copied, setCopied] = useState<"yes" | "failed" | null>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied("yes");
    } catch {
      setCopied("failed");
    }
  };
  return (
    <section className="notice notice-warning secret-once" aria-labelledby="secret-once-title">
      <h2 id="secret-once-title">{label}</h2>
      <p>
        <strong>Copy it now: it is shown this once.</strong> The service keeps only a hash of it.
      </p>
      <p>
        <code className="secret" aria-label={label}>
          {secret}
        </code>
      </p>
      <button type="button" onClick={copy}>
        Copy {label.toLowerCase()}
      </button>{" "}
      <span role="status">{copied === "yes" ? "Copied." : copied === "failed" ? "Could not copy: select it and copy by hand." : ""}</span>{" "}
      <button type="button" onClick={onDismiss}>
        I have saved it
      </button>
    </section>
  );
}
