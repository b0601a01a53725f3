/**
 * Databases that tests of this process closed, emptied and kept for the next opener: opening one
 * costs tenths of a CPU-second, emptying one milliseconds (docs/testing.md, "What a test file pays
 * for"). An open database holds its process open (PGlite's idle statistics timer, knex's pool
 * timer), so one not taken again within `keepMs` is closed: a process that is done exits that much
 * later. A file's subtests open their next one within milliseconds of closing the last.
 */
export class ReusePool<Item> {
  private readonly kept: Array<{ item: Item; closer: NodeJS.Timeout }> = [];

  constructor(
    private readonly close: (item: Item) => Promise<void>,
    private readonly limits: { max: number; keepMs: number } = { max: 2, keepMs: 200 },
  ) {}

  /** A kept item, or undefined when none is. */
  take(): Item | undefined {
    const kept = this.kept.pop();
    if (kept === undefined) return undefined;
    clearTimeout(kept.closer);
    return kept.item;
  }

  /** Whether another kept item would only hold memory: tests open one or two at a time. */
  get full(): boolean {
    return this.kept.length >= this.limits.max;
  }

  /** Keeps an emptied item for the next taker. */
  keep(item: Item): void {
    const entry = {
      item,
      closer: setTimeout(() => {
        this.kept.splice(this.kept.indexOf(entry), 1);
        void this.close(item);
      }, this.limits.keepMs),
    };
    entry.closer.unref();
    this.kept.push(entry);
  }
}
