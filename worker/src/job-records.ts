import fs from "node:fs";
import path from "node:path";
import type { Job } from "@svc/contract";

/** An agent job a restarted worker can pick up again: what it was asked, and the CLI session it keeps on disk. */
export interface JobRecord {
  jobId: string;
  job: Job;
  sessionId: string;
  /** The CLI's own id of the session, when it names it itself (Codex's thread id). */
  cliSessionId?: string;
  /** How long the service waits for the machine (its grace when the job began), in ms: a record not resumed within it is dropped. */
  graceMs: number;
}

/**
 * The resumable agent jobs of this worker, one file each in its folder (`jobs/<job>.job.json`,
 * readable by the user only), written when a job begins and deleted when it is forgotten: after a
 * crash or a kill, the next `svc-worker start` finds them and resumes each CLI's own session when
 * the service asks for the job back (`resume_job`).
 */
export class JobRecords {
  constructor(private readonly dir: string) {}

  save(record: JobRecord): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(this.file(record.jobId), JSON.stringify(record), { mode: 0o600 });
  }

  remove(jobId: string): void {
    fs.rmSync(this.file(jobId), { force: true });
  }

  /** The records left by an earlier run of the worker; an unreadable one is dropped. */
  load(): JobRecord[] {
    let names: string[] = [];
    try {
      names = fs.readdirSync(this.dir).filter((n) => n.endsWith(".job.json"));
    } catch {
      return [];
    }
    const records: JobRecord[] = [];
    for (const name of names) {
      const file = path.join(this.dir, name);
      try {
        const r = JSON.parse(fs.readFileSync(file, "utf8")) as JobRecord;
        if (typeof r.jobId === "string" && typeof r.sessionId === "string" && r.job?.kind === "agent_run") records.push(r);
        else fs.rmSync(file, { force: true });
      } catch {
        fs.rmSync(file, { force: true });
      }
    }
    return records;
  }

  private file(jobId: string): string {
    return path.join(this.dir, `${jobId.replace(/[^A-Za-z0-9_-]/g, "_")}.job.json`);
  }
}
