import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TEXT_PIECE_CHARS, TEXT_WINDOW_MS, textBatcher } from "../../worker/src/connection.js";

/**
 * How the worker sends a job's text deltas: at most once per window, a delta after a
 * quiet spell at once, and one that comes within the window held only for the rest of
 * it, so a model streaming at the window's pace is relayed piece by piece.
 */
describe("the worker's text deltas", () => {
  let sent: [number, string][];
  let texts: ReturnType<typeof textBatcher>;
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
    sent = [];
    texts = textBatcher((text) => sent.push([Date.now(), text]), () => Date.now());
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  /** `text` arrives at `at` (ms since the start). */
  const arrive = (at: number, text: string) => {
    vi.advanceTimersByTime(at - Date.now());
    texts.add(text);
  };

  it("a stream paced at the window, a little early at times, goes piece by piece, each held by its earliness at most", () => {
    expect(TEXT_WINDOW_MS).toBe(20);
    arrive(0, "a");
    arrive(19, "b");
    arrive(40, "c");
    arrive(58, "d");
    arrive(81, "e");
    vi.advanceTimersByTime(100);
    expect(sent).toEqual([
      [0, "a"],
      [20, "b"],
      [40, "c"],
      [60, "d"],
      [81, "e"],
    ]);
  });

  it("pieces coming together go together once the window is over; never more than one send per window", () => {
    arrive(0, "a");
    arrive(1, "b");
    arrive(2, "c");
    arrive(15, "d");
    vi.advanceTimersByTime(100);
    expect(sent).toEqual([
      [0, "a"],
      [20, "bcd"],
    ]);
  });

  it("what waits is sent before the job's next other event; a long text goes at once, in pieces", () => {
    arrive(0, "a");
    arrive(5, "b");
    texts.flush();
    expect(sent).toEqual([
      [0, "a"],
      [5, "b"],
    ]);
    // Just sent: the next one waits for the rest of the window.
    arrive(6, "c");
    texts.flush();
    arrive(7, "x".repeat(TEXT_PIECE_CHARS + 10));
    expect(sent.slice(2)).toEqual([
      [6, "c"],
      [7, "x".repeat(TEXT_PIECE_CHARS)],
      [7, "x".repeat(10)],
    ]);
    texts.flush();
    vi.advanceTimersByTime(100);
    expect(sent).toHaveLength(5);
  });
});
