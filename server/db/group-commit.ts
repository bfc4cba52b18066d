import { isDatabaseUnavailable } from "./outage.js";

/**
 * Group commit: writes that arrive while one is in flight wait and go together
 * in the next statement, so a burst of requests costs a few statements instead
 * of one each (on PGlite a statement costs more CPU than the rest of a request).
 * A write goes after one turn of the event loop (`setImmediate`): the requests
 * already received in that turn join it. That matters on PGlite, whose statements
 * run on this thread and never let a request in while they run; on Postgres the
 * writes in flight gather the next batch anyway. Each caller's promise
 * resolves once its item is committed, with what `write` answered for it (its
 * place in the array `write` returns; nothing when it returns nothing). A batch
 * that fails is written again item by item, so one bad item fails only its own
 * caller (rejected: its row does not exist), never the others that happened to
 * share its statement; a batch that fails because the database is away fails
 * every caller at once, each with that outage.
 */
export class GroupCommit<T, R = void> {
  private queue: { item: T; resolve: (r: R) => void; reject: (err: unknown) => void }[] = [];
  private flushing = false;
  private scheduled = false;

  constructor(
    private readonly write: (items: T[]) => Promise<R[] | void>,
    private readonly maxBatch = 256,
    /** Called when the last waiting item is written and nothing is left (a keyed owner drops the group then). */
    private readonly onIdle: () => void = () => {},
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.flushing && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          void this.flush();
        });
      }
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      try {
        const results = await this.write(batch.map((b) => b.item));
        batch.forEach((b, i) => b.resolve(results?.[i] as R));
      } catch (err) {
        // The database away: each item alone would meet the same outage, one after another; all are told at once (a retryable 503).
        if (batch.length === 1 || isDatabaseUnavailable(err)) for (const b of batch) b.reject(err);
        else for (const b of batch) await this.write([b.item]).then((r) => b.resolve(r?.[0] as R), b.reject);
      }
    }
    this.flushing = false;
    this.onIdle();
  }
}

/**
 * Group commit per key: the items of one key go together, one statement of a key in flight at a
 * time, while different keys' statements go side by side (each key its own `GroupCommit`, dropped
 * when it has nothing left to write).
 */
export class KeyedGroupCommit<T, R = void> {
  private readonly groups = new Map<string, GroupCommit<T, R>>();

  constructor(
    private readonly write: (items: T[]) => Promise<R[] | void>,
    private readonly maxBatch = 256,
  ) {}

  add(key: string, item: T): Promise<R> {
    let group = this.groups.get(key);
    if (!group) {
      const made = new GroupCommit<T, R>(this.write, this.maxBatch, () => {
        if (this.groups.get(key) === made) this.groups.delete(key);
      });
      group = made;
      this.groups.set(key, made);
    }
    return group.add(item);
  }

  /** Keys with items waiting or in flight. */
  get size(): number {
    return this.groups.size;
  }
}
