import { createBrowserRouter, Navigate } from "react-router";
import { RequireSession } from "./components/RequireSession";
import { Shell } from "./components/Shell";
import { EnvScope } from "./components/EnvScope";
import { SignIn } from "./pages/SignIn";
import { AcceptInvite } from "./pages/AcceptInvite";
import { Home } from "./pages/Home";
import { Apps } from "./pages/Apps";
import { Account } from "./pages/Account";
import { Keys } from "./pages/Keys";
import { Members } from "./pages/Members";
import { Users } from "./pages/Users";
import { UserDetail } from "./pages/UserDetail";
import { Usage } from "./pages/Usage";
import { Runs } from "./pages/Runs";
import { RunDetail } from "./pages/RunDetail";
import { Plans } from "./pages/Plans";
import { Billing } from "./pages/Billing";
import { Conversions } from "./pages/Conversions";
import { Webhooks } from "./pages/Webhooks";
import { NotFound } from "./pages/NotFound";

/** Every page under /dashboard; the service answers index.html for all of them. */
export const router = createBrowserRouter(
  [
    { path: "/sign-in", element: <SignIn /> },
    { path: "/invite", element: <AcceptInvite /> },
    {
      element: <RequireSession />,
      children: [
        {
          element: <Shell />,
          children: [
            { index: true, element: <Home /> },
            { path: "apps", element: <Apps /> },
            { path: "account", element: <Account /> },
            { path: "apps/:app", element: <Navigate to="test/users" replace /> },
            { path: "apps/:app/keys", element: <Keys /> },
            { path: "apps/:app/members", element: <Members /> },
            {
              path: "apps/:app/:env",
              element: <EnvScope />,
              children: [
                { index: true, element: <Navigate to="users" replace /> },
                { path: "users", element: <Users /> },
                { path: "users/:user", element: <UserDetail /> },
                { path: "usage", element: <Usage /> },
                { path: "runs", element: <Runs /> },
                { path: "runs/:id", element: <RunDetail /> },
                { path: "plans", element: <Plans /> },
                { path: "billing", element: <Billing /> },
                { path: "conversions", element: <Conversions /> },
                { path: "webhooks", element: <Webhooks /> },
              ],
            },
            { path: "*", element: <NotFound /> },
          ],
        },
      ],
    },
  ],
  { basename: "/dashboard" },
);
