import { useInfiniteQuery, type InfiniteData, type QueryKey } from "@tanstack/react-query";

/** How many rows a list asks for at a time. */
const PAGE_SIZE = 50;

interface CursorPage<T> {
  data: T[];
  hasMore: boolean;
  nextCursor: string | null;
}

const allRows = <T,>(pages: InfiniteData<CursorPage<T>, string | undefined>) => pages.pages.flatMap((p) => p.data);

/**
 * A list the API hands out a page at a time: `cursor` from the previous page's `nextCursor` while
 * `hasMore`. `data` is every row fetched so far, in order; `fetchNextPage` reads the next page.
 */
export function useCursorPages<T>(queryKey: QueryKey, fetchPage: (page: { cursor: string | undefined; limit: number }) => Promise<CursorPage<T>>) {
  return useInfiniteQuery({
    queryKey,
    queryFn: ({ pageParam }) => fetchPage({ cursor: pageParam, limit: PAGE_SIZE }),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => (page.hasMore ? (page.nextCursor ?? undefined) : undefined),
    select: allRows<T>,
  });
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
