import { Outlet, useParams } from "react-router";
import type { z } from "zod";
import type { Environment } from "@svc/contract";
import { NotFound } from "../pages/NotFound";

export type Env = z.infer<typeof Environment>;

/** The app and environment of the page, from the URL. */
export function useEnvParams(): { app: string; env: Env } {
  const { app, env } = useParams();
  return { app: app!, env: env as Env };
}

/** Pages of one environment: only `test` and `live` exist. */
export function EnvScope() {
  const { env } = useParams();
  if (env !== "test" && env !== "live") return <NotFound />;
  return (
    <div className={`env-scope env-${env}`}>
      <Outlet />
    </div>
  );
}
