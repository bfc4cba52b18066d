import { Link } from "react-router";
import { useWhere } from "./where";

/** Test and live side by side; the current one is marked for eyes (colour and label) and for screen readers. */
export function EnvSwitcher({ app, current }: { app: string; current: "test" | "live" | null }) {
  const where = useWhere();
  const section = where.env && where.section ? where.section : "users";
  return (
    <nav aria-label="Environment" className="env-switcher">
      {(["test", "live"] as const).map((env) => (
        <Link key={env} to={`/apps/${encodeURIComponent(app)}/${env}/${section}`} className={`env-tab env-tab-${env}`} aria-current={env === current ? "page" : undefined}>
          {env === "test" ? "Test" : "Live"}
        </Link>
      ))}
    </nav>
  );
}
