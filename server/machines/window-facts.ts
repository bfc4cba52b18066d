import type { RuntimeLimits, UsageWindow } from "@svc/contract";
import type { Clock } from "../clock.js";
import type { MachineRef, WebhookFacts } from "../webhooks/facts.js";

/** The longest wait a reset is timed for here (a timer's limit is about 24.8 days; windows are 7 days at most). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Tells the app when an agent CLI's subscription window on a user's machine is
 * spent and when it resets (`runtime.window_spent`, `runtime.window_reset`), from
 * the reports the machine sends (`runtime_limits`): a window becoming `rejected` is
 * spent; it resets when its reset time passes (timed on the instance that took the
 * report) or when a later report says it is usable again, whichever comes first.
 * Each fact is recorded once per machine, runtime, window and reset time, however
 * many reports or instances say it (the webhook outbox's key). A reset timed on an
 * instance that stops is said by the next report instead.
 */
export class WindowFacts {
  /** Resets timed here, by machine, runtime and window. */
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly facts: WebhookFacts,
    private readonly clock: Clock,
  ) {}

  /** A report replaced `previous` with `now` on a runtime's row. */
  reported(m: MachineRef, runtime: string, previous: RuntimeLimits | null, now: RuntimeLimits): void {
    const before = new Map((previous?.windows ?? []).map((w) => [w.window, w]));
    for (const w of now.windows) {
      const was = before.get(w.window);
      if (w.status === "rejected") {
        void this.facts.runtimeWindow("spent", m, runtime, w);
        this.timeReset(m, runtime, w);
      } else if (was?.status === "rejected") {
        // Usable again before (or without) its timer: reset, under the reset time it was spent until.
        this.untime(m, runtime, w.window);
        void this.facts.runtimeWindow("reset", m, runtime, was);
      }
    }
  }

  /** No more timers (the instance is shutting down). */
  stop(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
  }

  private timeReset(m: MachineRef, runtime: string, w: UsageWindow): void {
    if (!w.resetsAt) return;
    const key = timerKey(m, runtime, w.window);
    this.untime(m, runtime, w.window);
    const wait = Date.parse(w.resetsAt) - this.clock.now().getTime();
    if (wait > MAX_TIMER_MS) return;
    const timer = setTimeout(() => {
      this.timers.delete(key);
      void this.facts.runtimeWindow("reset", m, runtime, w);
    }, Math.max(0, wait));
    timer.unref();
    this.timers.set(key, timer);
  }

  private untime(m: MachineRef, runtime: string, window: string): void {
    const key = timerKey(m, runtime, window);
    const t = this.timers.get(key);
    if (t) clearTimeout(t);
    this.timers.delete(key);
  }
}

const timerKey = (m: MachineRef, runtime: string, window: string) => `${m.machineId} ${runtime} ${window}`;
