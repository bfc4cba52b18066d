import { useState, type FormEvent } from "react";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { api, call } from "../api/client";
import { ME_KEY, useSession } from "../api/session";
import { ErrorNotice } from "../components/ErrorNotice";
import { Field } from "../components/Field";
import { PageHeader } from "../components/PageHeader";
import { formatTime } from "../format/time";

export function Account() {
  const me = useSession();
  const client = useQueryClient();
  const [saved, setSaved] = useState(false);
  const setPassword = useMutation({
    mutationFn: (body: { currentPassword?: string; newPassword: string }) => call(api.ownerSetPassword({ body })),
    onSuccess: () => {
      setSaved(true);
      void client.invalidateQueries({ queryKey: ME_KEY });
    },
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    setSaved(false);
    setPassword.mutate({ currentPassword: me.owner.hasPassword ? String(form.get("currentPassword")) : undefined, newPassword: String(form.get("newPassword")) });
    e.currentTarget.reset();
  };
  return (
    <>
      <PageHeader title="Your account" />
      <dl className="facts">
        <dt>Email</dt>
        <dd>{me.owner.email}</dd>
        <dt>Name</dt>
        <dd>{me.owner.name ?? "—"}</dd>
        <dt>This session ends</dt>
        <dd>{formatTime(me.sessionExpiresAt)}</dd>
      </dl>
      <form onSubmit={submit} className="card" aria-labelledby="password-title">
        <h2 id="password-title">{me.owner.hasPassword ? "Change your password" : "Set a password"}</h2>
        {me.owner.hasPassword && <Field label="Current password" name="currentPassword" type="password" autoComplete="current-password" required />}
        <Field label="New password" name="newPassword" type="password" autoComplete="new-password" minLength={10} required hint="At least 10 characters. Your other sessions are signed out." />
        <ErrorNotice error={setPassword.error} />
        {saved && <p role="status">Password saved.</p>}
        <button type="submit" className="primary" disabled={setPassword.isPending}>
          Save password
        </button>
      </form>
    </>
  );
}
