import { useMemo } from "react";
import { useInfiniteQuery, useQuery, type QueryKey } from "@tanstack/react-query";

/** How many rows a list asks for at a time. */
const PAGE_SIZE = 50;

/**
 * How often a page that keeps up asks the service again. Only while the tab is visible: react-query
 * does not poll a hidden tab (`refetchIntervalInBackground` is off), and asks at once when it shows again.
 */
export const LIVE_INTERVAL_MS = 5_000;

interface CursorPage<T> {
  data: T[];
  hasMore: boolean;
  nextCursor: string | null;
}

/** A row's id, for matching a row shown with the same row read again (rows without one are never matched). */
const idOf = (row: unknown): string | undefined => {
  const id = (row as { id?: unknown } | null)?.id;
  return typeof id === "string" ? id : undefined;
};

/**
 * A list the API hands out a page at a time: `cursor` from the previous page's `nextCursor` while
 * `hasMore`. `data` is every row fetched so far, in order; `fetchNextPage` reads the next page.
 *
 * `live`: the list keeps up on its own while the tab is visible, and never moves a row under the reader.
 * The decision: Stripe's dashboard's way as we recall it (no document of Stripe's was checked): rows
 * being read are not reshuffled, newer ones wait behind an "N new" control. So:
 * - While only the first page is shown, it is read again every LIVE_INTERVAL_MS: new rows appear on
 *   top and changed rows (a run that ended, a delivery delivered) change.
 * - Once the owner has loaded more (reading page 2 and on), the rows shown stay where they are: only
 *   the first page is read again (`head`, one request), the rows shown that it holds are updated in
 *   place, and rows newer than the first one shown are counted (`newer`), not inserted; `showNewer`
 *   (the `NewerRows` button, "N new: show") reads the pages again with them on top.
 */
export function useCursorPages<T>(queryKey: QueryKey, fetchPage: (page: { cursor: string | undefined; limit: number }) => Promise<CursorPage<T>>, options: { live?: boolean } = {}) {
  const live = options.live === true;
  const list = useInfiniteQuery({
    queryKey,
    queryFn: ({ pageParam }) => fetchPage({ cursor: pageParam, limit: PAGE_SIZE }),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => (page.hasMore ? (page.nextCursor ?? undefined) : undefined),
    refetchInterval: (q) => (live && !q.state.error && (q.state.data?.pages.length ?? 0) <= 1 ? LIVE_INTERVAL_MS : false),
  });
  const reading = live && (list.data?.pages.length ?? 0) > 1;
  const head = useQuery({
    queryKey: [...queryKey, "head"],
    queryFn: () => fetchPage({ cursor: undefined, limit: PAGE_SIZE }),
    enabled: reading,
    refetchInterval: reading ? LIVE_INTERVAL_MS : false,
  });
  // The first page read after the pages shown (an older one says nothing about them).
  const fresh = reading && head.data && head.dataUpdatedAt >= list.dataUpdatedAt ? head.data : null;
  const { data, newer, moreNewer } = useMemo(() => {
    const rows = list.data?.pages.flatMap((p) => p.data);
    if (!rows || !fresh) return { data: rows, newer: 0, moreNewer: false };
    const shown = new Set(rows.map(idOf));
    const now = new Map(fresh.data.map((r) => [idOf(r), r] as const));
    // Rows of the first page before the first one also shown are new; with none shown, all are (and maybe more).
    const firstShown = fresh.data.findIndex((r) => idOf(r) !== undefined && shown.has(idOf(r)));
    return {
      data: rows.map((r) => (idOf(r) !== undefined ? (now.get(idOf(r)) ?? r) : r)),
      newer: firstShown === -1 ? fresh.data.length : firstShown,
      moreNewer: firstShown === -1 && fresh.hasMore,
    };
  }, [list.data, fresh]);
  const showNewer = async () => {
    await list.refetch();
    await head.refetch();
  };
  return { ...list, data, newer, moreNewer, showNewer };
}

/** The button under a paged list, while there is more to read. */
export function LoadMore({ pages, children }: { pages: { hasNextPage: boolean; isFetchingNextPage: boolean; fetchNextPage: () => unknown }; children: string }) {
  if (!pages.hasNextPage) return null;
  return (
    <button type="button" onClick={() => pages.fetchNextPage()} disabled={pages.isFetchingNextPage}>
      {children}
    </button>
  );
}

/**
 * Above a live list the owner has read further into: how many newer rows there are, and a button
 * putting them on top. Announced politely to screen readers; empty (but present) while there are none.
 */
export function NewerRows({ pages, what }: { pages: { newer: number; moreNewer: boolean; showNewer: () => unknown; isRefetching: boolean }; what: [one: string, many: string] }) {
  const n = pages.newer;
  return (
    <div aria-live="polite" className="newer-rows">
      {n > 0 && (
        <button type="button" onClick={() => pages.showNewer()} disabled={pages.isRefetching}>
          {n}
          {pages.moreNewer ? "+" : ""} new {n === 1 && !pages.moreNewer ? what[0] : what[1]}: show
        </button>
      )}
    </div>
  );
}
