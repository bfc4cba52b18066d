import type { ReactNode } from "react";

/** A button for what cannot be undone: it asks `question` first and acts only on yes. */
export function ConfirmButton({
  question,
  onConfirm,
  children,
  label,
  disabled,
  className = "danger",
}: {
  question: string;
  onConfirm: () => void;
  children: ReactNode;
  /** The accessible name, when the visible text alone does not say what it acts on. */
  label?: string;
  disabled?: boolean;
  className?: string;
}) {
  return (
    <button type="button" className={className} aria-label={label} disabled={disabled} onClick={() => window.confirm(question) && onConfirm()}>
      {children}
    </button>
  );
}
