import type { Env } from "./EnvScope";

/** Which environment, by colour and by name. */
export function EnvBadge({ env }: { env: Env }) {
  return <span className={`env-badge env-badge-${env}`}>{env === "live" ? "Live" : "Test"}</span>;
}
