import type { ReactNode } from "react";
import { EnvBadge } from "./EnvBadge";
import { useWhere } from "./where";

/** The page's one h1, with the environment it shows named beside it. */
export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  const { env } = useWhere();
  return (
    <div className="page-header">
      <h1>
        {title}
        {env && <EnvBadge env={env} />}
      </h1>
      {children}
    </div>
  );
}
