import type { FormEvent } from "react";
import { useMutation } from "@tanstack/react-query";
import { useNavigate } from "react-router";
import { OWNER_INVITE_PREFIX } from "@svc/contract";
import { api, call } from "../api/client";
import { useSignedIn } from "../api/session";
import { ErrorNotice } from "../components/ErrorNotice";
import { Field } from "../components/Field";
import { useHashToken } from "../components/hash-token";

/** An invitation link (`/dashboard/invite#token=oin_...`): join the app, making an account when the email has none. */
export function AcceptInvite() {
  const navigate = useNavigate();
  const signedIn = useSignedIn();
  const token = useHashToken(OWNER_INVITE_PREFIX);
  const accept = useMutation({
    mutationFn: (body: { token: string; email: string; name?: string; password?: string }) => call(api.ownerAcceptInvite({ body })),
    onSuccess: (me) => {
      signedIn(me);
      navigate("/", { replace: true });
    },
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const name = String(form.get("name") ?? "").trim();
    const password = String(form.get("password") ?? "");
    accept.mutate({ token: token!, email: String(form.get("email")), name: name || undefined, password: password || undefined });
  };
  return (
    <main id="main" className="centered">
      <h1>Accept your invitation</h1>
      {!token ? (
        <div role="alert" className="notice notice-error">
          This page needs the whole invitation link you were sent (it ends in <code>#token=oin_…</code>). Ask for a new one if it was lost.
        </div>
      ) : (
        <form onSubmit={submit} className="card" aria-labelledby="invite-form-title">
          <h2 id="invite-form-title">Your account</h2>
          <Field label="Email" name="email" type="email" autoComplete="username" required />
          <Field label="Name" name="name" autoComplete="name" />
          <Field label="Password" name="password" type="password" autoComplete="new-password" minLength={10} hint="New account: choose one of at least 10 characters. Existing account: your current password." />
          <ErrorNotice error={accept.error} />
          <button type="submit" className="primary" disabled={accept.isPending}>
            Join the app
          </button>
        </form>
      )}
    </main>
  );
}
