import type { Knex } from 'knex';
import type { DomainEvent } from '../domain/event.js';
import type { RecordedEvent } from '../eventstore/envelope.js';

/**
 * A read-model projection: `(events) -> read-model writes`. One file per read model in
 * `projections/`, defined with `projection()` below. The runner applies events in global order
 * inside one transaction per batch and writes the projection's checkpoint in that same
 * transaction, so each event takes effect exactly once and a rebuild from position 0 yields the
 * same rows as the live run.
 */
export interface Projection {
  /** Unique, stable name: the checkpoint key and the argument of `factlog projections rebuild`. */
  readonly name: string;
  /** Event types this projection reacts to; other events only advance its checkpoint. */
  readonly eventTypes: readonly string[];
  /** Tables whose rows are wholly derived from the log: emptied before a rebuild. */
  readonly tables: readonly string[];
  /**
   * Writes outside the read-model database (the OpenSearch index). A shared batch applies such
   * projections first, before the transaction writes a row and so takes a transaction id: on a
   * server every running transaction id holds back the event store's global readers.
   */
  readonly external?: boolean;
  /**
   * Its rows start work that reads the other read models (the job intake). When a shared batch
   * is split into several transactions (on PGlite, to let a waiting request in), it commits
   * last, so a job never runs before the read models have applied its trigger.
   */
  readonly startsWork?: boolean;
  /**
   * Types whose events change rows that events of other streams write too (a merge moves a
   * fact's links, which any source's extraction adds to). Fed from the bus, a projection's
   * batches of different streams are applied side by side, one transaction each; a batch holding
   * one of these types is applied alone (src/projection/lock.ts, lockProjectionStreams), so it
   * sees every row the others wrote, and they see its rows.
   */
  readonly exclusiveTypes?: readonly string[];
  /** Must be deterministic: no clocks, no randomness, nothing but the event and the transaction. */
  apply(trx: Knex.Transaction, event: RecordedEvent): Promise<void>;
  /**
   * Applies events of `eventTypes`, in log order, with the effect of `apply` on each in turn but
   * fewer statements (multi-row writes). Runners call it when present.
   */
  applyBatch?(trx: Knex.Transaction, events: readonly RecordedEvent[]): Promise<void>;
}

/** Applies `events` (already filtered to the projection's types) the fastest way it offers. */
export async function applyEvents(projection: Projection, trx: Knex.Transaction, events: readonly RecordedEvent[]): Promise<void> {
  if (events.length === 0) return;
  if (projection.applyBatch) {
    await projection.applyBatch(trx, events);
    return;
  }
  for (const event of events) await projection.apply(trx, event);
}

/** The recorded form of each member of a domain event union (`type` and `data` typed together). */
export type RecordedOf<E extends DomainEvent<string, unknown>> = E extends DomainEvent<string, unknown> ? RecordedEvent<E['type'], E['data']> : never;

/** Applies a run of consecutive events of one type (in log order). */
export type RunHandler<E extends DomainEvent<string, unknown>> = (trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<E>>) => Promise<void>;

/** One handler per event type of `E`: the type checker refuses a missing or an extra one. */
export type ProjectionHandlers<E extends DomainEvent<string, unknown>> = { readonly [T in E['type']]: RunHandler<Extract<E, { type: T }>> };

export interface ProjectionDefinition<E extends DomainEvent<string, unknown>> {
  name: string;
  tables: readonly string[];
  external?: boolean;
  /**
   * Per event type, what a run of consecutive events of that type does (`each` adapts a
   * one-event handler). The projection's `eventTypes` are these keys, so they cannot drift.
   */
  handlers: ProjectionHandlers<E>;
  /**
   * Groups of types whose events of different streams commute, and whose events of one stream
   * come in the group's order (a concept's ConceptCreated before its ConceptEmbedded). A run of
   * consecutive events of one group goes to the handlers type by type, in the group's order, so
   * interleaved types still make long runs; a stream whose events break the order ends the run.
   */
  batchTogether?: ReadonlyArray<ReadonlyArray<E['type']> | BatchGroup<E>>;
  /** See Projection.exclusiveTypes. */
  exclusive?: ReadonlyArray<E['type']>;
}

/**
 * A batchTogether group with a handler of its own: it gets a whole run of the group (every
 * type, in log order) and must leave what the types' handlers would, applied type by type in the
 * group's order. It can then write each row once per run (a fact inserted with its embedding and
 * stabilization) instead of once per event type.
 */
export interface BatchGroup<E extends DomainEvent<string, unknown>> {
  readonly types: ReadonlyArray<E['type']>;
  readonly handler: RunHandler<E>;
}

/**
 * Defines a projection over the domain event union `E` (e.g. `projection<UserEvent>({...})`).
 * The events given to `applyBatch` are split into runs of one type, each passed to its handler
 * in log order: a handler may write a whole run with one statement, as long as the result equals
 * applying its events one after another.
 */
export function projection<E extends DomainEvent<string, unknown>>(definition: ProjectionDefinition<E>): Projection {
  const handlers: Readonly<Record<string, RunHandler<E>>> = definition.handlers;
  const eventTypes = Object.keys(handlers);
  const handled = new Set(eventTypes);
  /** Per grouped type: its group and its rank in it. */
  const grouping = new Map<string, { group: readonly string[]; rank: number }>();
  /** The group handler of each group that has one. */
  const groupHandlers = new Map<readonly string[], RunHandler<E>>();
  for (const entry of definition.batchTogether ?? []) {
    const group: readonly string[] = isBatchGroup(entry) ? entry.types : entry;
    if (isBatchGroup(entry)) groupHandlers.set(group, entry.handler);
    group.forEach((type, rank) => {
      if (grouping.has(type)) throw new Error(`projection ${definition.name}: ${type} is in two batchTogether groups`);
      if (!handled.has(type)) throw new Error(`projection ${definition.name}: batchTogether names ${type}, which it does not handle`);
      grouping.set(type, { group, rank });
    });
  }
  const applyRun = async (trx: Knex.Transaction, run: RecordedEvent[]) => {
    const handler = handlers[run[0].type];
    if (handler && isRunOf<E>(run, handled)) await handler(trx, run);
  };
  const applyGroupRun = async (trx: Knex.Transaction, group: readonly string[], run: RecordedEvent[]) => {
    const groupHandler = groupHandlers.get(group);
    if (groupHandler && run.length > 1 && isRunOf<E>(run, handled)) {
      await groupHandler(trx, run);
      return;
    }
    for (const type of group) {
      const ofType = run.filter((event) => event.type === type);
      if (ofType.length > 0) await applyRun(trx, ofType);
    }
  };
  return {
    name: definition.name,
    eventTypes,
    tables: definition.tables,
    ...(definition.external ? { external: true } : {}),
    ...(definition.exclusive?.length ? { exclusiveTypes: definition.exclusive } : {}),
    apply: (trx, event) => applyRun(trx, [event]),
    async applyBatch(trx, events) {
      let run: RecordedEvent[] = [];
      let runGroup: readonly string[] | null = null;
      /** Within a group run: the rank of the last event of each stream. */
      let streamRanks = new Map<string, number>();
      const flush = async () => {
        if (run.length === 0) return;
        if (runGroup) await applyGroupRun(trx, runGroup, run);
        else await applyRun(trx, run);
        run = [];
        streamRanks = new Map();
      };
      for (const event of events) {
        const grouped = grouping.get(event.type);
        const fits = grouped
          ? runGroup === grouped.group && (streamRanks.get(event.streamId) ?? -1) <= grouped.rank
          : runGroup === null && run.length > 0 && run[0].type === event.type;
        if (!fits) {
          await flush();
          runGroup = grouped?.group ?? null;
        }
        run.push(event);
        if (grouped) streamRanks.set(event.streamId, grouped.rank);
      }
      await flush();
    },
  };
}

function isBatchGroup<E extends DomainEvent<string, unknown>>(entry: ReadonlyArray<E['type']> | BatchGroup<E>): entry is BatchGroup<E> {
  return !Array.isArray(entry);
}

/**
 * Narrows events to `E` by their type tag. Their data needs no check here: the store validated
 * every event against its type's Avro schema before appending it, and the domain event types
 * mirror those schemas.
 */
function isRunOf<E extends DomainEvent<string, unknown>>(
  run: ReadonlyArray<RecordedEvent<string, unknown>>,
  types: ReadonlySet<string>,
): run is ReadonlyArray<RecordedOf<E>> {
  return run.every((event) => types.has(event.type));
}

/** A run handler that applies its events one at a time (for types that gain nothing from batching). */
export function each<E extends DomainEvent<string, unknown>>(handler: (trx: Knex.Transaction, event: RecordedOf<E>) => Promise<void>): RunHandler<E> {
  return async (trx, events) => {
    for (const event of events) await handler(trx, event);
  };
}

export interface ProjectionStatus {
  name: string;
  /** Global position of the last event applied. */
  position: number;
  /** Global position of the log head when measured. */
  head: number;
  /** head - position. */
  lag: number;
  /** running | rebuilding | stopped | failed */
  state: 'running' | 'rebuilding' | 'stopped' | 'failed';
  lastError: string | null;
}

/** A write the caller wants to read back: where it landed in the log and what it contained. */
export interface AppendedWrite {
  position: number;
  streamId: string;
  /** Version of the last event appended to the stream. */
  streamVersion: number;
  types: readonly string[];
}

/**
 * What the service needs of a projection runner, on either tier: the embedded runner follows the
 * global log; the bus runner consumes Kafka and keeps per-stream checkpoints.
 */
export interface ReadModelRunner {
  start(): Promise<void>;
  stop(): Promise<void>;
  status(): Promise<ProjectionStatus[]>;
  /**
   * Resolves once every projection that handles the write's event types has applied it, except
   * those it does not wait for (failed, stopped or being rebuilt), which it answers: the
   * projections that handle the write and may not have applied it. After `timeoutMs` it rejects
   * with ProjectionWaitTimeoutError, whose `unapplied` names them.
   */
  settle(write: AppendedWrite, timeoutMs: number): Promise<readonly string[]>;
  /**
   * Whether every running projection has applied the whole log through `position` (waiting up to
   * `timeoutMs` for it) and none is being rebuilt: what "the pipeline is done" needs, since the
   * job intake is a projection and a finished job's follow-up exists only once its events are
   * applied, and a rebuild's tables are empty until it has replayed the log.
   */
  caughtUp(position: number, timeoutMs: number): Promise<boolean>;
  /**
   * Whether the one projection `name` has applied the whole log through `position` (waiting up
   * to `timeoutMs` for it) and is not being rebuilt, whatever its state: what a command needs
   * that trusts its read model's "not there" (adding a URL the repository may have), since
   * `settle` does not wait for a failed or stopped projection and gives up after its timeout.
   *
   * With `streamId`, the stream of the write that ends at `position` (a lock's mark,
   * src/app/lockMarks.ts), it asks only whether the projection applied that write: the embedded
   * runner, which follows the log in order, answers as without it; the bus runner, whose
   * consumers keep no order across streams, reads the projection's checkpoint of that stream, so
   * events appended after the write (the pipeline keeps appending) do not hold the answer back.
   */
  projectionReached(name: string, position: number, timeoutMs: number, streamId?: string): Promise<boolean>;
  /**
   * Rebuilds the projection from position 0 and resolves at its end. `onProgress(done, total)`,
   * in global positions, comes first as `(0, total)` once the rebuild has started (its tables
   * emptied: from then on a second rebuild is refused), then as it replays. A rebuild under way
   * is refused with ProjectionRebuildConflictError before anything is emptied; on the distributed
   * tier one whose node stopped is taken over instead.
   */
  rebuild(name: string, onProgress?: (done: number, total: number) => void): Promise<void>;
}
