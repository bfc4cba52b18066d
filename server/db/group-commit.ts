/**
 * Group commit: writes that arrive while one is in flight wait and go together
 * in the next statement, so a burst of requests costs a few statements instead
 * of one each (on PGlite a statement costs more CPU than the rest of a request).
 * A write goes after one turn of the event loop (`setImmediate`): the requests
 * already received in that turn join it. That matters on PGlite, whose statements
 * run on this thread and never let a request in while they run; on Postgres the
 * writes in flight gather the next batch anyway. Each caller's promise
 * resolves once its item is committed. A batch that fails is written again item
 * by item, so one bad item fails only its own caller (rejected: its row does
 * not exist), never the others that happened to share its statement.
 */
export class GroupCommit<T> {
  private queue: { item: T; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private flushing = false;
  private scheduled = false;

  constructor(
    private readonly write: (items: T[]) => Promise<void>,
    private readonly maxBatch = 256,
  ) {}

  add(item: T): Promise<void> {
    return new Promise<void>((resolve, reject) => {
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
        await this.write(batch.map((b) => b.item));
        for (const b of batch) b.resolve();
      } catch (err) {
        if (batch.length === 1) batch[0].reject(err);
        else for (const b of batch) await this.write([b.item]).then(b.resolve, b.reject);
      }
    }
    this.flushing = false;
  }
}
