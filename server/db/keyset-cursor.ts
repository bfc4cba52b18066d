import { ApiError } from "../errors.js";

/**
 * The cursor of a page read newest first by (created_at, id): opaque to the
 * client, and stable while rows are written (a new row never shifts a page).
 */
export function encodeCursor(createdAt: Date, id: string): string {
  return Buffer.from(JSON.stringify([createdAt.toISOString(), id])).toString("base64url");
}

export function decodeCursor(cursor: string): { createdAt: Date; id: string } {
  try {
    const [at, id] = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown[];
    const createdAt = new Date(String(at));
    if (typeof id === "string" && typeof at === "string" && !Number.isNaN(createdAt.getTime())) return { createdAt, id };
  } catch {
    // falls through to the error below
  }
  throw new ApiError("invalid_request", "Invalid query field `cursor`: pass the `nextCursor` of a previous page.", { param: "cursor" });
}

/** Where a page read newest first by (created_at, id) starts: after this row (its cursor's), or, null, at the newest. */
export type PageStart = { createdAt: Date; id: string } | null;

/**
 * One page of rows read newest first by (created_at, id). `read` reads at most `take` rows
 * after `after` (one more than the page: whether more follow), `createdAt` is a row's time;
 * the page's rows, whether more follow, and the cursor of the next page (its last row's).
 */
export async function keysetPage<R extends { id: string }>(
  q: { cursor?: string; limit: number },
  read: (after: PageStart, take: number) => Promise<R[]>,
  createdAt: (row: R) => Date | string,
): Promise<{ rows: R[]; hasMore: boolean; nextCursor: string | null }> {
  const rows = await read(q.cursor ? decodeCursor(q.cursor) : null, q.limit + 1);
  const hasMore = rows.length > q.limit;
  const page = rows.slice(0, q.limit);
  const last = page.at(-1);
  return { rows: page, hasMore, nextCursor: hasMore && last ? encodeCursor(new Date(createdAt(last)), last.id) : null };
}
