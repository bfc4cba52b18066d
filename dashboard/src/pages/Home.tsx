import { Navigate } from "react-router";
import { useSession } from "../api/session";

/** Straight to the first app's test environment; with none, to creating one. */
export function Home() {
  const me = useSession();
  const first = me.apps[0];
  return <Navigate to={first ? `/apps/${encodeURIComponent(first.id)}/test/overview` : "/apps"} replace />;
}
