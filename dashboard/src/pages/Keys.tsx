import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useParams } from "react-router";
import type { z } from "zod";
import type { CreatedKey, OwnerKey } from "@svc/contract";
import { api, call } from "../api/client";
import { ConfirmButton } from "../components/ConfirmButton";
import { DataTable } from "../components/DataTable";
import { EnvBadge } from "../components/EnvBadge";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { SecretOnce } from "../components/SecretOnce";
import { formatTime } from "../format/time";

type Key = z.infer<typeof OwnerKey>;
const GRACE = [
  { seconds: 0, label: "none: the old key stops at once" },
  { seconds: 3600, label: "1 hour" },
  { seconds: 86_400, label: "1 day" },
  { seconds: 7 * 86_400, label: "7 days" },
];

function keyState(k: Key): string {
  if (k.revokedAt) return `revoked ${formatTime(k.revokedAt)}`;
  if (k.expiresAt) return `rotated: works until ${formatTime(k.expiresAt)}`;
  return "active";
}

/** A key's name, and a small form to change it (an empty name clears it). */
function KeyName({ k, onRename, busy }: { k: Key; onRename: (name: string | null) => void; busy: boolean }) {
  const [editing, setEditing] = useState(false);
  if (!editing) {
    return (
      <>
        {k.name ?? <span className="muted">unnamed</span>}{" "}
        <button type="button" className="link-button" onClick={() => setEditing(true)} aria-label={`Rename ${k.display}`}>
          Rename
        </button>
      </>
    );
  }
  const save = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const name = String(new FormData(e.currentTarget).get("name") ?? "").trim();
    onRename(name === "" ? null : name);
    setEditing(false);
  };
  return (
    <form onSubmit={save} className="rename-form">
      <input name="name" defaultValue={k.name ?? ""} maxLength={100} aria-label={`Name of ${k.display}`} autoFocus />
      <button type="submit" disabled={busy}>
        Save
      </button>
      <button type="button" onClick={() => setEditing(false)}>
        Cancel
      </button>
    </form>
  );
}

export function Keys() {
  const app = useParams().app!;
  const client = useQueryClient();
  const queryKey = ["owner", app, "keys"];
  const keys = useQuery({ queryKey, queryFn: () => call(api.ownerListKeys({ params: { app } })) });
  const [secret, setSecret] = useState<z.infer<typeof CreatedKey> | null>(null);
  const [grace, setGrace] = useState(86_400);
  const refresh = () => client.invalidateQueries({ queryKey });
  const create = useMutation({
    mutationFn: (body: { environment: "test" | "live"; kind: "app" | "connect"; name?: string }) => call(api.ownerCreateKey({ params: { app }, body })),
    onSuccess: (k) => (setSecret(k), refresh()),
  });
  const rename = useMutation({
    mutationFn: ({ keyId, name }: { keyId: string; name: string | null }) => call(api.ownerRenameKey({ params: { app, keyId }, body: { name } })),
    onSuccess: refresh,
  });
  const rotate = useMutation({
    mutationFn: (keyId: string) => call(api.ownerRotateKey({ params: { app, keyId }, body: { graceSeconds: grace } })),
    onSuccess: (r) => (setSecret(r.key), refresh()),
  });
  const revoke = useMutation({ mutationFn: (keyId: string) => call(api.ownerRevokeKey({ params: { app, keyId } })), onSuccess: refresh });

  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const formElement = e.currentTarget;
    const form = new FormData(formElement);
    const name = String(form.get("name") ?? "").trim();
    create.mutate(
      { environment: form.get("environment") as "test" | "live", kind: form.get("kind") as "app" | "connect", ...(name ? { name } : {}) },
      { onSuccess: () => formElement.reset() },
    );
  };

  return (
    <>
      <PageHeader title="Keys" />
      {secret && <SecretOnce label={`New ${secret.environment} ${secret.kind} key`} secret={secret.secret} onDismiss={() => setSecret(null)} />}
      <ErrorNotice error={create.error ?? rotate.error ?? revoke.error ?? rename.error} />
      {keys.isPending && <Loading label="Loading keys" />}
      <ErrorNotice error={keys.error} />
      <div className="side-by-side">
        {(["test", "live"] as const).map((env) => (
          <section key={env} aria-labelledby={`keys-${env}`} className={`card env-${env}`}>
            <h2 id={`keys-${env}`}>
              <EnvBadge env={env} /> keys
            </h2>
            <DataTable
              rows={keys.data?.data.filter((k) => k.environment === env) ?? []}
              rowKey={(k) => k.id}
              columns={[
                { label: "Name", cell: (k) => <KeyName k={k} onRename={(name) => rename.mutate({ keyId: k.id, name })} busy={rename.isPending} /> },
                { label: "Key", cell: (k) => <code>{k.display}</code> },
                { label: "Kind", cell: (k) => k.kind },
                { label: "Created", cell: (k) => `${formatTime(k.createdAt)}${k.createdBy ? ` by ${k.createdBy.name ?? k.createdBy.email ?? k.createdBy.id}` : ""}` },
                { label: "State", cell: keyState },
                { label: "Last used", cell: (k) => formatTime(k.lastUsedAt) },
                {
                  label: "Actions",
                  actions: true,
                  cell: (k) => (
                    <>
                      {!k.revokedAt && !k.expiresAt && (
                        <button type="button" onClick={() => rotate.mutate(k.id)} disabled={rotate.isPending} aria-label={`Rotate ${k.display}`}>
                          Rotate
                        </button>
                      )}
                      {!k.revokedAt && (
                        <ConfirmButton question={`Revoke ${k.display} now? Requests with it fail at once.`} label={`Revoke ${k.display}`} onConfirm={() => revoke.mutate(k.id)}>
                          Revoke
                        </ConfirmButton>
                      )}
                    </>
                  ),
                },
              ]}
            />
          </section>
        ))}
      </div>
      <div className="field">
        <label htmlFor="grace">When rotating, the old key keeps working for</label>
        <select id="grace" value={grace} onChange={(e) => setGrace(Number(e.target.value))}>
          {GRACE.map((g) => (
            <option key={g.seconds} value={g.seconds}>
              {g.label}
            </option>
          ))}
        </select>
      </div>
      <form onSubmit={submit} className="card inline-form" aria-labelledby="create-key-title">
        <h2 id="create-key-title">Create a key</h2>
        <label>
          Environment{" "}
          <select name="environment" defaultValue="test">
            <option value="test">Test</option>
            <option value="live">Live</option>
          </select>
        </label>
        <label>
          Name <input name="name" maxLength={100} placeholder="production server" autoComplete="off" />
        </label>
        <label>
          Kind{" "}
          <select name="kind" defaultValue="app">
            <option value="app">App key (secret, for your server)</option>
            <option value="connect">Connect key (public, for your pages)</option>
          </select>
        </label>
        <button type="submit" className="primary" disabled={create.isPending}>
          Create key
        </button>
      </form>
    </>
  );
}
