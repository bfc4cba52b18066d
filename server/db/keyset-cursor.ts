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
