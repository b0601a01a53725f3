import type { Logger } from 'pino';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Bus } from '../../bus/port.js';
import { BusProjectionRunner } from '../../projection/busRunner.js';
import { ProjectionRebuildConflictError, ProjectionRunner } from '../../projection/runner.js';
import type { Projection, ReadModelRunner } from '../../projection/types.js';

/** A projection's own way to rebuild, instead of the runner's empty-the-tables-and-replay. */
export type RebuildStrategy = (onProgress?: (done: number, total: number) => void) => Promise<void>;

/** Rebuild strategies by projection name. */
export type RebuildStrategies = ReadonlyMap<string, RebuildStrategy>;

/**
 * The projection runner of the tier: on Kafka a bus runner (consumer groups, per-stream
 * checkpoints), otherwise the runner that follows the event store's global log. `rebuild` of a
 * projection named in `rebuildStrategies` runs that strategy; every other call goes to the runner.
 */
export function createProjectionRunner(deps: {
  store: EventStore;
  db: Database;
  bus: Bus | null;
  projections: readonly Projection[];
  rebuildStrategies: RebuildStrategies;
  groupPrefix: string;
  /** On the bus tier: where the relay has published the log through (`relayedPosition` in wiring/bus.ts). */
  publishedPosition?: () => Promise<number>;
  log: Logger;
}): ReadModelRunner {
  const log = deps.log.child({ component: 'projections' });
  const runner: ReadModelRunner = deps.bus
    ? new BusProjectionRunner(deps.bus, deps.store, deps.db, deps.projections, { groupPrefix: deps.groupPrefix, log, publishedPosition: deps.publishedPosition })
    : new ProjectionRunner(deps.store, deps.db, deps.projections, { log });
  return withRebuildStrategies(runner, deps.rebuildStrategies);
}

/**
 * A runner whose `rebuild` of the named projections follows their strategy, on either runner
 * implementation. The strategy runs beside the live projection (it is not halted): the search
 * index keeps taking live writes into the old index while the new one fills. While it runs, the
 * projection's status says `rebuilding` and a second rebuild is refused, as the runner does for
 * its own: two reindexes side by side would each fill an index and swap it in.
 */
export function withRebuildStrategies(runner: ReadModelRunner, strategies: RebuildStrategies): ReadModelRunner {
  if (strategies.size === 0) return runner;
  const underway = new Set<string>();
  return {
    start: () => runner.start(),
    stop: () => runner.stop(),
    async status() {
      return (await runner.status()).map((status) => (underway.has(status.name) ? { ...status, state: 'rebuilding' as const } : status));
    },
    settle: (write, timeoutMs) => runner.settle(write, timeoutMs),
    caughtUp: (position, timeoutMs) => runner.caughtUp(position, timeoutMs),
    // A strategy's rebuild fills a new index beside the live one: until it is swapped in, the live one is not the whole log.
    projectionReached: async (name, position, timeoutMs, streamId) => !underway.has(name) && runner.projectionReached(name, position, timeoutMs, streamId),
    async rebuild(name, onProgress) {
      const strategy = strategies.get(name);
      if (!strategy) return runner.rebuild(name, onProgress);
      if (underway.has(name)) throw new ProjectionRebuildConflictError(`projection ${name} is already rebuilding`);
      underway.add(name);
      try {
        await strategy(onProgress);
      } finally {
        underway.delete(name);
      }
    },
  };
}
