/**
 * A read that many waiters poll, made once per tick for all of them. A waiter asks for some keys
 * and gets the values read at the next tick, at most `intervalMs` away, in one read of every key
 * asked for until then; a key the read did not find is missing from the map. A hundred requests
 * waiting for their writes to be applied make one query every tick instead of a hundred. A failed
 * read fails the waiters of its tick; the next tick reads again.
 */
export class PolledReads<V> {
  private next: { keys: Set<string>; values: Promise<Map<string, V>> } | null = null;

  constructor(
    private readonly read: (keys: readonly string[]) => Promise<Map<string, V>>,
    private readonly intervalMs: number,
  ) {}

  /** The values of `keys` as the next tick reads them; no keys, nothing to wait for. */
  atNextTick(keys: readonly string[]): Promise<Map<string, V>> {
    if (keys.length === 0) return Promise.resolve(new Map());
    if (this.next === null) {
      const asked = new Set<string>();
      const values = new Promise<void>((resolve) => setTimeout(resolve, this.intervalMs)).then(() => {
        // Keys asked for from here on go to the tick after this one.
        this.next = null;
        return this.read([...asked]);
      });
      this.next = { keys: asked, values };
    }
    for (const key of keys) this.next.keys.add(key);
    return this.next.values;
  }
}
