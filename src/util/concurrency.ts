/**
 * Runs `work` over `items` with at most `limit` in flight, results in input order. The first
 * failure stops new work from starting and is rethrown once the running ones settle.
 */
export async function mapWithConcurrency<Item, Result>(
  items: readonly Item[],
  limit: number,
  work: (item: Item, index: number) => Promise<Result>,
): Promise<Result[]> {
  const results = new Array<Result>(items.length);
  let next = 0;
  let failure: { error: unknown } | null = null;
  const worker = async (): Promise<void> => {
    while (failure === null && next < items.length) {
      const index = next++;
      try {
        results[index] = await work(items[index], index);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failure !== null) throw (failure as { error: unknown }).error;
  return results;
}

/**
 * A promise to sleep on until someone pokes it (or, given `ms`, that long passes). A poke that
 * came while nobody waited makes the next wait return at once, so a poke is never lost between
 * a check and the wait that follows it.
 */
export class Doorbell {
  private ring: (() => void) | null = null;
  private pending = false;

  poke(): void {
    if (this.ring) this.ring();
    else this.pending = true;
  }

  wait(ms?: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const finish = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        if (this.ring === finish) this.ring = null;
        resolve();
      };
      const timer = ms === undefined ? undefined : setTimeout(finish, ms);
      this.ring = finish;
    });
  }
}

/** At most `limit` holders at once; waiters get a freed place in the order they came. */
export class Semaphore {
  private held = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`a semaphore needs a limit of at least 1, got ${String(limit)}`);
  }

  /** Runs `work` once a place is free, and frees it when `work` settles. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.held < this.limit) this.held += 1;
    // The place of the holder that leaves passes straight to the first waiter (held stays).
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.held -= 1;
    }
  }
}

/** Resolves after the event loop's next turn (timers and I/O that came meanwhile run first). */
export function nextTurnOfEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
