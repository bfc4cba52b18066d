import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useParams } from "react-router";
import { api, call } from "../api/client";
import { useSession } from "../api/session";
import { ConfirmButton } from "../components/ConfirmButton";
import { DataTable } from "../components/DataTable";
import { ErrorNotice } from "../components/ErrorNotice";
import { Field } from "../components/Field";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { SecretOnce } from "../components/SecretOnce";
import { formatTime } from "../format/time";

export function Members() {
  const app = useParams().app!;
  const me = useSession();
  const client = useQueryClient();
  const queryKey = ["owner", app, "members"];
  const members = useQuery({ queryKey, queryFn: () => call(api.ownerListMembers({ params: { app } })) });
  const [link, setLink] = useState<string | null>(null);
  const invite = useMutation({
    mutationFn: (body: { email?: string; role: "owner" | "member" }) => call(api.ownerCreateInvite({ params: { app }, body })),
    onSuccess: (i) => {
      setLink(i.url);
      void client.invalidateQueries({ queryKey });
    },
  });
  const remove = useMutation({
    mutationFn: (ownerId: string) => call(api.ownerRemoveMember({ params: { app, ownerId } })),
    onSuccess: (list) => client.setQueryData(queryKey, list),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const email = String(form.get("email") ?? "").trim();
    invite.mutate({ email: email || undefined, role: form.get("role") as "owner" | "member" });
  };
  return (
    <>
      <PageHeader title="Members" />
      {members.isPending && <Loading label="Loading members" />}
      <ErrorNotice error={members.error ?? remove.error} />
      {members.data && (
        <DataTable
          caption="People who can use this app's dashboard"
          showCaption
          rows={members.data.data}
          rowKey={(m) => m.owner.id}
          columns={[
            {
              label: "Member",
              cell: (m) => (
                <>
                  {m.owner.name ?? m.owner.email} {m.owner.name && <span className="muted">{m.owner.email}</span>}
                  {m.owner.id === me.owner.id && <span className="tag">you</span>}
                </>
              ),
            },
            { label: "Role", cell: (m) => m.role },
            { label: "Joined", cell: (m) => formatTime(m.joinedAt) },
            {
              label: "Actions",
              cell: (m) => (
                <ConfirmButton question={`Remove ${m.owner.email} from this app?`} label={`Remove ${m.owner.email}`} onConfirm={() => remove.mutate(m.owner.id)}>
                  Remove
                </ConfirmButton>
              ),
            },
          ]}
        />
      )}
      {members.data && members.data.invites.length > 0 && (
        <section aria-labelledby="open-invites">
          <h2 id="open-invites">Open invitations</h2>
          <ul>
            {members.data.invites.map((i) => (
              <li key={i.id}>
                {i.email ?? "anyone with the link"} as {i.role}, until {formatTime(i.expiresAt)}
              </li>
            ))}
          </ul>
        </section>
      )}
      {link && <SecretOnce label="Invitation link" secret={link} onDismiss={() => setLink(null)} />}
      <form onSubmit={submit} className="card" aria-labelledby="invite-title">
        <h2 id="invite-title">Invite by link</h2>
        <Field label="Invitee's email" name="email" type="email" hint="Optional: when given, only this email can accept." />
        <div className="field">
          <label htmlFor="invite-role">Role</label>
          <select id="invite-role" name="role" defaultValue="member">
            <option value="member">Member</option>
            <option value="owner">Owner (manages keys and members)</option>
          </select>
        </div>
        <ErrorNotice error={invite.error} />
        <button type="submit" className="primary" disabled={invite.isPending}>
          Create invitation link
        </button>
      </form>
    </>
  );
}
