import fs from "node:fs";
import path from "node:path";

/** A job's unacknowledged events kept in memory up to this many bytes; older ones go to a file in the worker's folder. */
export const JOB_LOG_MEMORY_BYTES = 1024 * 1024;
/** ...and in that file up to this many bytes: past it the job cannot be resumed exactly, so it is stopped. */
export const JOB_LOG_FILE_BYTES = 256 * 1024 * 1024;

/**
 * The events of one job the service has not acknowledged yet (`job_ack`), numbered
 * and kept as the frames that carried them, so that after a lost link the job can be
 * resumed from the last event the service stored (`resume_job`): every event once.
 * The newest stay in memory (`JOB_LOG_MEMORY_BYTES`); older ones are spilled, in order,
 * to a file of their own in the worker's folder (one line per frame: JSON never holds
 * a raw newline), deleted once acknowledged or when the job is forgotten.
 */
export class JobLog {
  private memory: { n: number; frame: string }[] = [];
  private memoryBytes = 0;
  private file: string | null = null;
  private fileBytes = 0;
  /** The newest event number in the file (0: none). */
  private fileLast = 0;
  /** Everything up to here is acknowledged (or was never kept). */
  private acked = 0;

  constructor(
    private readonly dir: string,
    private readonly jobId: string,
    private readonly limits = { memoryBytes: JOB_LOG_MEMORY_BYTES, fileBytes: JOB_LOG_FILE_BYTES },
  ) {}

  /** Keeps event `n`'s frame; false when the log is full (the job can no longer be resumed exactly). */
  append(n: number, frame: string): boolean {
    this.memory.push({ n, frame });
    this.memoryBytes += frame.length;
    while (this.memoryBytes > this.limits.memoryBytes && this.memory.length > 1) {
      const oldest = this.memory.shift()!;
      this.memoryBytes -= oldest.frame.length;
      if (this.fileBytes + oldest.frame.length + 1 > this.limits.fileBytes) return false;
      if (!this.file) {
        fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        this.file = path.join(this.dir, `${this.jobId.replace(/[^A-Za-z0-9_-]/g, "_")}.events`);
        fs.writeFileSync(this.file, "", { mode: 0o600 });
      }
      fs.appendFileSync(this.file, `${oldest.frame}\n`);
      this.fileBytes += oldest.frame.length + 1;
      this.fileLast = oldest.n;
    }
    return true;
  }

  /** The service stored every event up to `n`: they are dropped (the file once all of it is). */
  ack(n: number): void {
    if (n <= this.acked) return;
    this.acked = n;
    let drop = 0;
    while (drop < this.memory.length && this.memory[drop].n <= n) this.memoryBytes -= this.memory[drop++].frame.length;
    if (drop) this.memory = this.memory.slice(drop);
    if (this.file && this.fileLast <= n) this.removeFile();
  }

  /**
   * The frames of the events after `after`, in order; null when some of them are
   * no longer kept (acknowledged earlier than the service now says it stored).
   */
  since(after: number): string[] | null {
    if (after < this.acked) return null;
    const frames: string[] = [];
    if (this.file && this.fileLast > after) {
      for (const line of fs.readFileSync(this.file, "utf8").split("\n")) {
        if (!line) continue;
        if (numberOf(line) > after) frames.push(line);
      }
    }
    for (const e of this.memory) if (e.n > after) frames.push(e.frame);
    return frames;
  }

  /** Bytes kept in memory and in the file. */
  get size(): { memory: number; file: number } {
    return { memory: this.memoryBytes, file: this.fileBytes };
  }

  /** The job is forgotten: its file goes. */
  close(): void {
    this.memory = [];
    this.memoryBytes = 0;
    this.removeFile();
  }

  private removeFile(): void {
    if (this.file) fs.rmSync(this.file, { force: true });
    this.file = null;
    this.fileBytes = 0;
    this.fileLast = 0;
  }
}

/** A kept frame's event number (`"n":` in its payload). */
function numberOf(frame: string): number {
  return (JSON.parse(frame) as { payload: { n?: number } }).payload.n ?? 0;
}
