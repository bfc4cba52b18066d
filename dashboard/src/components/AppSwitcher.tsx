import { useRef } from "react";
import { Link } from "react-router";
import type { Me } from "../api/session";
import { sectionPath, useWhere } from "./where";

/** A disclosure listing the owner's apps: keyboard-usable as it is (summary, then links). */
export function AppSwitcher({ apps, current }: { apps: Me["apps"]; current: Me["apps"][number] | null }) {
  const where = useWhere();
  const box = useRef<HTMLDetailsElement>(null);
  // A choice closes the list (the page changes under it; an open list would cover it).
  const close = () => box.current?.removeAttribute("open");
  return (
    <details className="switcher app-switcher" ref={box}>
      <summary aria-label={`App ${current?.name ?? "Choose an app"} (switch app)`}>
        <span className="muted">App</span> {current?.name ?? "Choose an app"}
      </summary>
      <ul>
        {apps.map((a) => (
          <li key={a.id}>
            <Link to={sectionPath(a.id, where.env ?? "test", where)} onClick={close} aria-current={a.id === current?.id ? "true" : undefined}>
              {a.name} <span className="muted">{a.id}</span>
            </Link>
          </li>
        ))}
        <li>
          <Link to="/apps" onClick={close}>
            All apps, or create one
          </Link>
        </li>
      </ul>
    </details>
  );
}
