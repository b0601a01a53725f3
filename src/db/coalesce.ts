import { backgroundLevel, runAtLevel, type Level } from './priority.js';

/** Calls of one priority level: those waiting, and whether a batch of theirs is out. */
interface Lane<Call> {
  waiting: Call[];
  busy: boolean;
}

/**
 * Group commit for calls that each would be one statement: while a batch of a priority level
 * (src/db/priority.ts) is out, the calls of that level that arrive wait, and go together as the
 * next batch when it is back. A lone call goes at once, so nothing waits when nothing queues.
 * On a one-connection database (PGlite) the pipeline's jobs keep statements queued for the
 * connection, so batches grow by themselves to what arrived during one wait.
 *
 * `send` settles every call of its batch (each call carries its own resolve and reject) and runs
 * at the callers' level; when it throws, every call of the batch is rejected with the error (a
 * call it settled already keeps its outcome). `take` picks the next batch out of the waiting
 * calls (default: all); the calls it leaves go in a later batch. Returns the function that
 * queues a call.
 */
export function coalescer<Call extends { reject(error: unknown): void }>(send: (batch: Call[]) => Promise<void>, take: (waiting: Call[]) => Call[] = takeAll): (call: Call) => void {
  const lanes = new Map<Level, Lane<Call>>();

  function drain(lane: Lane<Call>, level: Level): void {
    if (lane.busy || lane.waiting.length === 0) return;
    lane.busy = true;
    const batch = take(lane.waiting);
    void runAtLevel(level, () => send(batch))
      .catch((error: unknown) => {
        for (const call of batch) call.reject(error);
      })
      .finally(() => {
        lane.busy = false;
        drain(lane, level);
      });
  }

  return (call) => {
    const level = backgroundLevel();
    let lane = lanes.get(level);
    if (!lane) {
      lane = { waiting: [], busy: false };
      lanes.set(level, lane);
    }
    lane.waiting.push(call);
    drain(lane, level);
  };
}

function takeAll<Call>(waiting: Call[]): Call[] {
  return waiting.splice(0, waiting.length);
}

/**
 * A `take` for batches that must stay short: each key at most once (a later call with a key
 * already taken waits for the next batch), and calls taken in arrival order until their weight
 * reaches `maxWeight` (the first call always goes, whatever its weight). A bounded batch keeps
 * the statement short, so a request that arrives meanwhile waits for a short statement, not a
 * long one (src/db/priority.ts: a holder is never interrupted).
 */
export function takeBounded<Call>(options: { keyOf?: (call: Call) => string; weightOf?: (call: Call) => number; maxWeight: number }): (waiting: Call[]) => Call[] {
  const weightOf = options.weightOf ?? (() => 1);
  return (waiting) => {
    const batch: Call[] = [];
    const rest: Call[] = [];
    const keys = new Set<string>();
    let weight = 0;
    for (const call of waiting) {
      const key = options.keyOf?.(call);
      const full = batch.length > 0 && weight >= options.maxWeight;
      if (full || (key !== undefined && keys.has(key))) {
        rest.push(call);
        continue;
      }
      if (key !== undefined) keys.add(key);
      batch.push(call);
      weight += weightOf(call);
    }
    waiting.splice(0, waiting.length, ...rest);
    return batch;
  };
}
