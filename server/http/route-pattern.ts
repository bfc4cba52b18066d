/** Turns a contract path (`/v1/runs/:id/cancel`) into a regex matching one path segment per parameter. */
export function routePattern(path: string): RegExp {
  const source = path
    .split("/")
    .map((seg) => (seg.startsWith(":") ? "[^/]+" : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
    .join("/");
  return new RegExp(`^${source}/?$`);
}
