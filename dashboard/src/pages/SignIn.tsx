import { useEffect, useRef, type FormEvent } from "react";
import { useMutation } from "@tanstack/react-query";
import { useLocation, useNavigate } from "react-router";
import { OWNER_SIGN_IN_LINK_PREFIX } from "@svc/contract";
import { api, call } from "../api/client";
import { useSignedIn, type Me } from "../api/session";
import { ErrorNotice } from "../components/ErrorNotice";
import { Field } from "../components/Field";
import { useHashToken } from "../components/hash-token";

/** Sign in with email and password, or with the one-time link `svc dashboard` prints (`#token=olt_...`). */
export function SignIn() {
  const navigate = useNavigate();
  const location = useLocation();
  const signedIn = useSignedIn();
  const from = (location.state as { from?: string } | null)?.from ?? "/";
  const done = (me: Me) => {
    signedIn(me);
    navigate(from, { replace: true });
  };
  const linkToken = useHashToken(OWNER_SIGN_IN_LINK_PREFIX);
  const withLink = useMutation({ mutationFn: (token: string) => call(api.ownerSignInWithLink({ body: { token } })), onSuccess: done });
  const withPassword = useMutation({ mutationFn: (body: { email: string; password: string }) => call(api.ownerSignIn({ body })), onSuccess: done });
  const started = useRef(false);
  useEffect(() => {
    if (linkToken && !started.current) {
      started.current = true;
      withLink.mutate(linkToken);
    }
  }, [linkToken, withLink]);

  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    withPassword.mutate({ email: String(form.get("email")), password: String(form.get("password")) });
  };

  return (
    <main id="main" className="centered">
      <h1>Sign in to the svc dashboard</h1>
      {linkToken && (
        <section aria-labelledby="link-title" className="card">
          <h2 id="link-title">Signing in with your link</h2>
          {withLink.isPending && <p role="status">Checking the link…</p>}
          <ErrorNotice error={withLink.error} title="This sign-in link did not work." />
          {withLink.isError && <p>Links work once and expire after 15 minutes: run <code>npx svc dashboard</code> in the service's folder for a new one, or sign in with your password below.</p>}
        </section>
      )}
      <form onSubmit={submit} className="card">
        <h2 id="password-title">With your password</h2>
        <Field label="Email" name="email" type="email" autoComplete="username" required />
        <Field label="Password" name="password" type="password" autoComplete="current-password" required />
        <ErrorNotice error={withPassword.error} />
        <button type="submit" className="primary" disabled={withPassword.isPending}>
          {withPassword.isPending ? "Signing in…" : "Sign in"}
        </button>
      </form>
      <p className="muted">
        No password yet? The first <code>npm start</code> printed a one-time sign-in link (it works for 15 minutes). For a new one, run <code>npx svc dashboard</code> in the service's folder, on the machine that runs it; once in, set a password on your account page.
      </p>
    </main>
  );
}
