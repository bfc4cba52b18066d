import { lazy, Suspense, type ComponentType } from "react";
import { createBrowserRouter, Navigate } from "react-router";
import { RequireSession } from "./components/RequireSession";
import { Shell } from "./components/Shell";
import { EnvScope } from "./components/EnvScope";
import { Loading } from "./components/Loading";
import { RouteError } from "./components/RouteError";
import { Home } from "./pages/Home";
import { NotFound } from "./pages/NotFound";

/**
 * A page loaded when it is first shown (its own chunk: the first load fetches only it and the shared
 * ones), by its module's named export: `page(() => import("./pages/Runs"), "Runs")`.
 */
function page<M>(load: () => Promise<M>, name: keyof M & string) {
  const Page = lazy(async () => ({ default: (await load())[name] as ComponentType }));
  return (
    <Suspense fallback={<Loading label="Loading the page" />}>
      <Page />
    </Suspense>
  );
}

/** Every page under /dashboard; the service answers index.html for all of them. */
export const router = createBrowserRouter(
  [
    { path: "/sign-in", element: page(() => import("./pages/SignIn"), "SignIn"), errorElement: <RouteError /> },
    { path: "/invite", element: page(() => import("./pages/AcceptInvite"), "AcceptInvite"), errorElement: <RouteError /> },
    {
      element: <RequireSession />,
      errorElement: <RouteError />,
      children: [
        {
          element: <Shell />,
          children: [
            {
              // A page that fails (its chunk gone after an update, a bug) says so inside the frame.
              errorElement: <RouteError />,
              children: [
                { index: true, element: <Home /> },
                { path: "apps", element: page(() => import("./pages/Apps"), "Apps") },
                { path: "account", element: page(() => import("./pages/Account"), "Account") },
                { path: "apps/:app", element: <Navigate to="test/overview" replace /> },
                { path: "apps/:app/keys", element: page(() => import("./pages/Keys"), "Keys") },
                { path: "apps/:app/members", element: page(() => import("./pages/Members"), "Members") },
                {
                  path: "apps/:app/:env",
                  element: <EnvScope />,
                  children: [
                    { index: true, element: <Navigate to="overview" replace /> },
                    { path: "overview", element: page(() => import("./pages/Overview"), "Overview") },
                    { path: "users", element: page(() => import("./pages/Users"), "Users") },
                    { path: "users/:user", element: page(() => import("./pages/UserDetail"), "UserDetail") },
                    { path: "usage", element: page(() => import("./pages/Usage"), "Usage") },
                    { path: "runs", element: page(() => import("./pages/Runs"), "Runs") },
                    { path: "runs/:id", element: page(() => import("./pages/RunDetail"), "RunDetail") },
                    { path: "requests", element: page(() => import("./pages/Requests"), "Requests") },
                    { path: "plans", element: page(() => import("./pages/Plans"), "Plans") },
                    { path: "billing", element: page(() => import("./pages/Billing"), "Billing") },
                    { path: "conversions", element: page(() => import("./pages/Conversions"), "Conversions") },
                    { path: "webhooks", element: page(() => import("./pages/Webhooks"), "Webhooks") },
                  ],
                },
                { path: "*", element: <NotFound /> },
              ],
            },
          ],
        },
      ],
    },
  ],
  { basename: "/dashboard" },
);
