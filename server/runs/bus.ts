import type { StoredEvent } from "./run-rows.js";

/** Someone reading a run's stream on this instance. */
export interface RunReader {
  /** An event the driver here just stored (in order, each once). */
  event(e: StoredEvent): void;
  /** Something new may be stored (written by another instance): read from the database. */
  wake(): void;
}

/**
 * In-process fan-out of a run's events to the readers of its stream on this
 * instance. The driver publishes after each write commits; events written on
 * another instance arrive as a wake (a notification), and the reader catches up
 * from the stored rows.
 */
export class RunBus {
  private readonly readers = new Map<string, Set<RunReader>>();

  subscribe(runId: string, reader: RunReader): () => void {
    let set = this.readers.get(runId);
    if (!set) this.readers.set(runId, (set = new Set()));
    set.add(reader);
    return () => {
      set.delete(reader);
      if (set.size === 0 && this.readers.get(runId) === set) this.readers.delete(runId);
    };
  }

  publish(runId: string, events: StoredEvent[]): void {
    const set = this.readers.get(runId);
    if (!set) return;
    for (const reader of set) for (const e of events) reader.event(e);
  }

  wake(runId: string): void {
    for (const reader of this.readers.get(runId) ?? []) reader.wake();
  }

  /** Wakes every reader (after a lost notification connection, say). */
  wakeAll(): void {
    for (const set of this.readers.values()) for (const reader of set) reader.wake();
  }
}
