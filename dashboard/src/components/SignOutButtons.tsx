import { useNavigate } from "react-router";
import { useSignOut } from "../api/session";
import { ConfirmButton } from "./ConfirmButton";

export function SignOutButtons() {
  const navigate = useNavigate();
  const signOut = useSignOut(false);
  const everywhere = useSignOut(true);
  const done = () => navigate("/sign-in", { replace: true });
  return (
    <>
      <button type="button" className="link-button" onClick={() => signOut.mutate(undefined, { onSettled: done })} disabled={signOut.isPending}>
        Sign out
      </button>
      <ConfirmButton className="link-button" question="Sign out of every browser where you are signed in, this one included?" onConfirm={() => everywhere.mutate(undefined, { onSettled: done })} disabled={everywhere.isPending}>
        Sign out everywhere
      </ConfirmButton>
    </>
  );
}
