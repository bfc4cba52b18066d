import { Navigate, Outlet, useLocation } from "react-router";
import { useMe, SessionProvider } from "../api/session";
import { ErrorNotice } from "./ErrorNotice";
import { Loading } from "./Loading";

/** The signed-in part of the dashboard: without a session, to sign-in (and back here after). */
export function RequireSession() {
  const me = useMe();
  const location = useLocation();
  if (me.isPending) return <Loading label="Checking your session" />;
  if (me.isError)
    return (
      <main id="main" className="centered">
        <h1>The dashboard cannot load</h1>
        <ErrorNotice error={me.error} />
      </main>
    );
  if (me.data === null) return <Navigate to="/sign-in" replace state={{ from: location.pathname + location.search }} />;
  return (
    <SessionProvider me={me.data}>
      <Outlet />
    </SessionProvider>
  );
}
