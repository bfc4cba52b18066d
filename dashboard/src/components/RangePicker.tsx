import type { FormEvent } from "react";

export interface Range {
  from: string;
  to: string;
}

/** A range of UTC days, applied on submit. */
export function RangePicker({ value, onChange }: { value: Range; onChange: (r: Range) => void }) {
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    onChange({ from: String(form.get("from")), to: String(form.get("to")) });
  };
  return (
    <form className="inline-form" onSubmit={submit} aria-label="Date range">
      <label>
        From <input type="date" name="from" defaultValue={value.from} required />
      </label>
      <label>
        To <input type="date" name="to" defaultValue={value.to} required />
      </label>
      <button type="submit">Show</button>
    </form>
  );
}
