import { useState, type FormEvent } from "react";
import { Link } from "react-router";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import type { z } from "zod";
import type { CreatedApp } from "@svc/contract";
import { api, call } from "../api/client";
import { ME_KEY, useSession } from "../api/session";
import { ErrorNotice } from "../components/ErrorNotice";
import { Field } from "../components/Field";
import { PageHeader } from "../components/PageHeader";
import { SecretOnce } from "../components/SecretOnce";

export function Apps() {
  const me = useSession();
  const client = useQueryClient();
  const [created, setCreated] = useState<z.infer<typeof CreatedApp> | null>(null);
  const create = useMutation({
    mutationFn: (name: string) => call(api.ownerCreateApp({ body: { name } })),
    onSuccess: (answer) => {
      setCreated(answer);
      void client.invalidateQueries({ queryKey: ME_KEY });
    },
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    create.mutate(String(new FormData(e.currentTarget).get("name")));
    e.currentTarget.reset();
  };
  return (
    <>
      <PageHeader title="Your apps" />
      {me.apps.length === 0 ? (
        <p>You are not a member of any app yet. Create one, or ask an owner of an app for an invitation link.</p>
      ) : (
        <ul className="app-list">
          {me.apps.map((a) => (
            <li key={a.id}>
              <Link to={`/apps/${encodeURIComponent(a.id)}/test/overview`}>{a.name}</Link> <span className="muted">{a.id}</span> <span className="tag">{a.role}</span>
            </li>
          ))}
        </ul>
      )}
      {created &&
        created.keys.map((k) => (
          <SecretOnce key={k.id} label={`${created.app.name}: ${k.kind === "app" ? "test app key" : "test connect key"}`} secret={k.secret} onDismiss={() => setCreated(null)} />
        ))}
      <form onSubmit={submit} className="card" aria-labelledby="create-app-title">
        <h2 id="create-app-title">Create an app</h2>
        <Field label="App name" name="name" required maxLength={200} />
        <ErrorNotice error={create.error} />
        <button type="submit" className="primary" disabled={create.isPending}>
          Create app
        </button>
      </form>
    </>
  );
}
