import { atGroupEnd, isGroupedRun } from './groupedRun.js';

/**
 * Databases that tests of this process closed, emptied and kept for the next opener: opening one
 * costs tenths of a CPU-second, emptying one milliseconds (docs/testing.md, "What a test file pays
 * for"). An open database holds its process open (PGlite's idle statistics timer, knex's pool
 * timer), so one not taken again within `keepMs` is closed: a process that is done exits that much
 * later. A file's subtests open their next one within milliseconds of closing the last.
 *
 * In a grouped run (test/group.ts) items are kept until the group's last file is done, which
 * closes them: the next opener is often a second or more away (the next file's modules load, a
 * test runs on a database of its own meanwhile), and an item closed by `keepMs` was then opened
 * again, 0.3–0.9 CPU-s each, several times a group (docs/performance.md, "Forty-fifth round").
 */
export class ReusePool<Item> {
  private readonly kept: Array<{ item: Item; closer: NodeJS.Timeout | undefined }> = [];
  private closedAtGroupEnd = false;

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
    if (isGroupedRun()) {
      if (!this.closedAtGroupEnd) atGroupEnd(() => this.closeKept());
      this.closedAtGroupEnd = true;
      this.kept.push({ item, closer: undefined });
      return;
    }
    const entry = {
      item,
      closer: setTimeout(() => {
        this.kept.splice(this.kept.indexOf(entry), 1);
        void this.close(item);
      }, this.limits.keepMs).unref(),
    };
    this.kept.push(entry);
  }

  /** Closes every kept item. */
  private async closeKept(): Promise<void> {
    this.closedAtGroupEnd = false;
    const kept = this.kept.splice(0);
    for (const { closer } of kept) clearTimeout(closer);
    await Promise.allSettled(kept.map(({ item }) => this.close(item)));
  }
}
