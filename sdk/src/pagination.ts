import type { PageBody } from "./wire.js";

/** One page of a list, with the way to the next one. `for await` over it yields its items and those of every later page. */
export class Page<T> implements PageBody<T>, AsyncIterable<T> {
  readonly data: T[];
  readonly hasMore: boolean;
  readonly nextCursor: string | null;
  readonly #fetch: (cursor: string) => Promise<PageBody<T>>;

  /** @internal */
  constructor(body: PageBody<T>, fetchPage: (cursor: string) => Promise<PageBody<T>>) {
    this.data = body.data;
    this.hasMore = body.hasMore;
    this.nextCursor = body.nextCursor;
    this.#fetch = fetchPage;
  }

  hasNextPage(): boolean {
    return this.hasMore && this.nextCursor !== null;
  }

  /** The next page; throws when there is none (`hasNextPage()`). */
  async getNextPage(): Promise<Page<T>> {
    if (!this.hasNextPage()) throw new Error("svc: no next page: check hasNextPage() first.");
    return new Page(await this.#fetch(this.nextCursor!), this.#fetch);
  }

  /** This page, then each later one, fetched as they are reached. */
  async *pages(): AsyncGenerator<Page<T>> {
    let page: Page<T> = this;
    yield page;
    while (page.hasNextPage()) yield (page = await page.getNextPage());
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for await (const page of this.pages()) yield* page.data;
  }
}

/**
 * What a `list` method returns: `await` it for the first page, or `for await` over
 * it for every item of every page, each page fetched only once the previous one
 * is read through. Nothing is requested until either happens.
 */
export class PagePromise<T> implements PromiseLike<Page<T>>, AsyncIterable<T> {
  readonly #load: () => Promise<Page<T>>;
  #first: Promise<Page<T>> | null = null;

  /** @internal */
  constructor(fetchPage: (cursor: string | undefined) => Promise<PageBody<T>>, cursor?: string) {
    this.#load = async () => new Page(await fetchPage(cursor), fetchPage);
  }

  #page(): Promise<Page<T>> {
    return (this.#first ??= this.#load());
  }

  then<A = Page<T>, B = never>(onFulfilled?: ((page: Page<T>) => A | PromiseLike<A>) | null, onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<A | B> {
    return this.#page().then(onFulfilled, onRejected);
  }

  catch<B = never>(onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<Page<T> | B> {
    return this.#page().catch(onRejected);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    yield* await this.#page();
  }
}
