import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Knex } from 'knex';
import type { Bus, BusConsumer } from '../bus/port.js';
import { type Database, migrateUnderLock } from '../db/database.js';
import { columnExists, relationsExist } from '../db/migrations.js';
import { inProjections } from '../db/priority.js';
import type { RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import { ProjectionRebuildConflictError, ProjectionRebuildStoppedError, ProjectionWaitTimeoutError, type RunnerLogger } from './runner.js';
import { lockProjectionStreams } from './lock.js';
import { applyEvents, type AppendedWrite, type Projection, type ProjectionStatus, type ReadModelRunner } from './types.js';
import { boundedErrorMessage } from '../util/errorMessage.js';
import { PolledReads } from '../util/polledReads.js';

/**
 * Creates `projection_stream_positions`, the per-stream checkpoints of bus-fed projections, and
 * `projection_rebuilds`, one row per projection a node is rebuilding (see rebuild).
 */
export async function migrateProjectionStreamPositions(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'projection_stream_positions', async (trx) => {
    await trx.raw(`CREATE TABLE IF NOT EXISTS projection_stream_positions (
      projection text NOT NULL,
      stream_id text NOT NULL,
      stream_version bigint NOT NULL,
      global_position bigint NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (projection, stream_id)
    )`);
    await trx.raw(`CREATE TABLE IF NOT EXISTS projection_rebuilds (
      projection text PRIMARY KEY,
      node text NOT NULL,
      started_at timestamptz NOT NULL DEFAULT now(),
      heartbeat_at timestamptz NOT NULL DEFAULT now(),
      rebuild_id text
    )`);
    // Which rebuild holds the mark: each replayed batch checks it is still its own (see rebuild).
    // A mark of a release before it has none, and belongs to no rebuild running now. Looked for
    // first: ALTER TABLE locks the table even when it has the column, and this runs at every
    // start and rebuild, while other nodes' batches read the marks.
    if (!(await columnExists(trx, 'projection_rebuilds', 'rebuild_id'))) await trx.raw(`ALTER TABLE projection_rebuilds ADD COLUMN rebuild_id text`);
  });
}

/**
 * A rebuild whose node has not replayed a batch for this long is taken to have stopped (the node
 * died or was killed): its projection stays held for consumers until a rebuild runs again to its
 * end, and a running node takes it over (see takeOverStoppedRebuilds). Longer than any one batch's
 * transaction takes; a node that was only slow finds its mark taken at its next batch and stops.
 */
const REBUILD_STALE_MS = 5 * 60_000;

/** How often a running node looks for rebuilds whose node stopped. */
const REBUILD_TAKEOVER_CHECK_MS = 60_000;

/** How often a consumer whose projection another node is rebuilding looks again. */
const REBUILD_WAIT_POLL_MS = 1_000;

/** A node's name in `projection_rebuilds`: for an operator looking for the node that holds a projection. */
const NODE_NAME = `${hostname()}:${process.pid}`;

interface RebuildMark {
  node: string;
  startedAt: Date;
  heartbeatAt: Date;
  /** How long ago its last batch was, by the database's clock (a node's clock may be off). */
  idleMs: number;
  /** Null on a mark a release before rebuild ids left. */
  rebuildId: string | null;
}

/** Thrown inside a consumer's transaction: the projection is being rebuilt (by any node), so its batch must wait. */
class ProjectionRebuildingError extends Error {
  override readonly name = 'ProjectionRebuildingError';
  constructor(readonly mark: RebuildMark) {
    super(`projection is being rebuilt by ${mark.node} since ${mark.startedAt.toISOString()}`);
  }
}

/**
 * Thrown inside a replayed batch's transaction (which it rolls back) when the projection's mark is
 * no longer the rebuild's own: another node took the rebuild over, taking this one for stopped.
 * Its replay ends there; the other's goes on, undisturbed by this one's batches.
 */
export class ProjectionRebuildTakenOverError extends Error {
  override readonly name = 'ProjectionRebuildTakenOverError';
  constructor(
    readonly projection: string,
    readonly by: string | null,
  ) {
    super(`the rebuild of projection ${projection} was taken over by ${by ?? 'another rebuild'} (it took this one for stopped); this node's replay ended`);
  }
}

interface Worker {
  projection: Projection;
  consumer: BusConsumer | null;
  state: ProjectionStatus['state'];
  lastError: string | null;
  /** Highest global position applied by this process (for status; other nodes may be further). */
  position: number;
  /**
   * Set while its consumer stops: a batch waiting for a rebuild's mark gives up (unacknowledged,
   * redelivered), since the bus's stop waits for the batch in flight, and the rebuild that stops
   * the consumer may be the one to clear the mark (taking over a stopped rebuild).
   */
  consumerStopping: boolean;
}

/** The bus's answer for status(): `published` null where no relay position is given. */
interface BusAnswer {
  published: number | null;
  backlog: Map<string, number>;
  consuming: Set<string>;
}

/**
 * Runs projections as bus consumer groups (the distributed tier). Kafka keeps order within a
 * stream only and delivers at least once, so each projection keeps a checkpoint per stream: an
 * event is applied only when its stream version is above the stored one, and the checkpoint is
 * written in the same transaction as the projection's rows. Duplicates from a relay restart or a
 * rebalance are absorbed; any number of nodes can run the same groups.
 */
export class BusProjectionRunner implements ReadModelRunner {
  private readonly workers = new Map<string, Worker>();
  /** Set by stop(): a batch waiting for another node's rebuild gives up, so its consumer can stop. */
  private stopping = false;
  private rebuildsTableMade = false;
  /** The rebuilds this process runs now: projection -> its rebuild id. */
  private readonly ownRebuilds = new Map<string, string>();
  /**
   * The per-stream checkpoints, the relay's published position and the consumer groups' backlog
   * that waiters poll (settle, projectionReached, caughtUp): read once per tick for every waiter of
   * the node, not once per waiter (keys: `projection\0stream`, `published`, the group).
   */
  private readonly checkpointReads: PolledReads<{ streamVersion: number; globalPosition: number }>;
  private readonly publishedReads: PolledReads<number> | null;
  private readonly backlogReads: PolledReads<number>;
  /** Set once the checkpoints' table is seen: an API node makes none (its workers' runners do). */
  private checkpointsTableSeen = false;
  private takeoverTimer: NodeJS.Timeout | null = null;
  /** The check of takeOverStoppedRebuilds under way, awaited by stop(). */
  private takeoverCheck: Promise<void> | null = null;
  /** The question to the bus that status() has under way, joined by every status meanwhile (askBus). */
  private busAnswer: Promise<BusAnswer> | null = null;

  private get nodeName(): string {
    return this.options.nodeName ?? NODE_NAME;
  }

  constructor(
    private readonly bus: Bus,
    private readonly store: EventStore,
    private readonly db: Database,
    projections: readonly Projection[],
    private readonly options: {
      groupPrefix?: string;
      log?: RunnerLogger;
      pollMs?: number;
      /**
       * Where the relay has published the log through (`bus_relay_positions`); without it
       * `caughtUp` takes the bus's backlog alone (a test that feeds the bus itself).
       */
      publishedPosition?: () => Promise<number>;
      /** Events a rebuild replays per transaction; default 500. */
      rebuildBatchSize?: number;
      /** This node's name in `projection_rebuilds`; default `<host name>:<pid>`. */
      nodeName?: string;
      /** After how long without a replayed batch a rebuild counts as stopped; default 5 minutes. */
      rebuildStaleMs?: number;
      /**
       * How long status() waits for the bus to say what the consumers owe before it counts lag from
       * the checkpoints instead; default 2 s (kafkajs reports an unreachable broker after about 9).
       */
      busAnswerWaitMs?: number;
      /** How often a started runner looks for stopped rebuilds to take over; default a minute. */
      takeoverCheckMs?: number;
    } = {},
  ) {
    for (const projection of projections) {
      if (this.workers.has(projection.name)) throw new Error(`two projections are named ${projection.name}`);
      this.workers.set(projection.name, { projection, consumer: null, state: 'stopped', lastError: null, position: 0, consumerStopping: false });
    }
    const pollMs = options.pollMs ?? 20;
    this.checkpointReads = new PolledReads((keys) => this.readCheckpoints(keys), pollMs);
    // Asked of the relay's table and of Kafka's admin API: no more often than every 50 ms.
    const { publishedPosition } = options;
    this.publishedReads = publishedPosition ? new PolledReads(async () => new Map([['published', await publishedPosition()]]), Math.max(pollMs, 50)) : null;
    this.backlogReads = new PolledReads((groups) => this.bus.backlog(groups), Math.max(pollMs, 50));
  }

  /** The checkpoints of `projection\0stream` keys (none before a node made the table). */
  private async readCheckpoints(keys: readonly string[]): Promise<Map<string, { streamVersion: number; globalPosition: number }>> {
    this.checkpointsTableSeen ||= await relationsExist(this.db.knex, 'projection_stream_positions');
    if (!this.checkpointsTableSeen) return new Map();
    const pairs = keys.map((key) => key.split('\0') as [string, string]);
    const rows: Array<{ projection: string; stream_id: string; stream_version: string | number; global_position: string | number }> = await this.db
      .knex('projection_stream_positions')
      .whereIn(['projection', 'stream_id'], pairs)
      .select('projection', 'stream_id', 'stream_version', 'global_position');
    return new Map(rows.map((row) => [checkpointKey(row.projection, row.stream_id), { streamVersion: Number(row.stream_version), globalPosition: Number(row.global_position) }]));
  }

  /** Whether the relay has published the log through `position` (always, where no relay position is given), as the next tick reads it. */
  private async publishedThrough(position: number): Promise<boolean> {
    if (this.publishedReads === null) return true;
    return ((await this.publishedReads.atNextTick(['published'])).get('published') ?? 0) >= position;
  }

  async start(): Promise<void> {
    this.stopping = false;
    await migrateProjectionStreamPositions(this.db.knex);
    for (const worker of this.workers.values()) await this.consume(worker);
    // At once (a mark this node's previous run left is known stopped now), then every so often.
    this.checkForStoppedRebuilds();
  }

  /** Runs takeOverStoppedRebuilds, then arms the next check; a check's failure is logged and the next one tries again. */
  private checkForStoppedRebuilds(): void {
    this.takeoverTimer = null;
    this.takeoverCheck = this.takeOverStoppedRebuilds()
      .catch((error: unknown) => this.options.log?.warn({ error: boundedErrorMessage(error) }, 'looking for stopped projection rebuilds failed; the next check tries again'))
      .finally(() => {
        this.takeoverCheck = null;
        if (this.stopping) return;
        this.takeoverTimer = setTimeout(() => this.checkForStoppedRebuilds(), this.options.takeoverCheckMs ?? REBUILD_TAKEOVER_CHECK_MS);
        this.takeoverTimer.unref();
      });
  }

  /**
   * A rebuild whose node stopped half-way (died, killed, cut off) leaves its mark, which holds
   * every node's consumers of the projection: a running node takes it over, rebuilding from 0
   * (the replay keeps no global position to go on from). Stopped means: no replayed batch for
   * rebuildStaleMs, or a mark of this node's name that no rebuild of this process holds (its
   * previous run's, as a restarted container's host name and pid are its previous run's). Nodes
   * checking at once agree under the projection's lock: one takes it over, the others find its
   * fresh mark and leave it.
   */
  private async takeOverStoppedRebuilds(): Promise<void> {
    if (this.stopping) return;
    const marks = await this.rebuildMarks(this.db.knex, [...this.workers.keys()]);
    for (const [name, mark] of marks) {
      if (this.stopping) return;
      if (this.ownRebuilds.has(name) || !this.stoppedRebuild(name, mark)) continue;
      this.options.log?.warn({ projection: name, node: mark.node, startedAt: mark.startedAt.toISOString(), lastBatchAt: mark.heartbeatAt.toISOString() }, 'projection rebuild taken over: its node stopped before its end');
      try {
        await this.rebuild(name);
      } catch (error) {
        // Another node took it over first (before, or during, this one's replay): its rebuild goes on.
        if (error instanceof ProjectionRebuildConflictError || error instanceof ProjectionRebuildTakenOverError) continue;
        if (this.stopping) return;
        this.options.log?.warn({ projection: name, error: boundedErrorMessage(error) }, 'taking over a stopped projection rebuild failed; the next check tries again');
      }
    }
  }

  /** Refuses a rebuild of `name` while another one's mark is there and has not stopped (one that stopped is taken over). */
  private refuseRebuildUnderWay(name: string, mark: RebuildMark | undefined): void {
    if (mark && !this.stoppedRebuild(name, mark)) {
      throw new ProjectionRebuildConflictError(`projection ${name} is already rebuilding on ${mark.node} (since ${mark.startedAt.toISOString()})`);
    }
  }

  /** Whether the mark of `name`'s rebuild says it stopped: no batch for rebuildStaleMs, or this node's name on a rebuild this process does not run. */
  private stoppedRebuild(name: string, mark: RebuildMark): boolean {
    return mark.idleMs >= this.staleMs || (mark.node === this.nodeName && this.ownRebuilds.get(name) !== mark.rebuildId);
  }

  private get staleMs(): number {
    return this.options.rebuildStaleMs ?? REBUILD_STALE_MS;
  }

  /** What status says of a rebuild that has stopped (stoppedRebuild); null while it goes on. */
  private stoppedRebuildNote(name: string, mark: RebuildMark): string | null {
    if (!this.stoppedRebuild(name, mark)) return null;
    return `the rebuild by ${mark.node} (started ${mark.startedAt.toISOString()}) stopped before its end, its last batch at ${mark.heartbeatAt.toISOString()}; consumers wait until a rebuild of ${name} runs to its end, and a running node takes it over`;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.takeoverTimer) clearTimeout(this.takeoverTimer);
    this.takeoverTimer = null;
    for (const worker of this.workers.values()) {
      await this.stopConsumer(worker);
      worker.state = 'stopped';
    }
    await this.takeoverCheck;
  }

  /**
   * Reads only (`projections list` on a read-only role or a replica): where no node has started
   * a bus runner yet, there is no table of stream positions, and every projection is at 0.
   * `position` is the highest position the projection applied (its checkpoints); `lag` what it
   * still owes, whichever node consumes it: the events the relay has not published yet and the
   * messages its consumer group has not acknowledged. Head minus position would count the events
   * of the types it does not read, which it never applies (a projection of rare events seemed
   * behind for ever). Where the bus cannot be asked, head minus position, and the reason in
   * `lastError`. A projection this node does not consume is `running` while its group has a member
   * on another node (a worker), as an API node or the CLI sees it.
   */
  async status(): Promise<ProjectionStatus[]> {
    const head = await this.store.headPosition();
    const { owed, consumedElsewhere } = await this.askBus(head);
    const rows: { projection: string; position: string | number }[] = (await relationsExist(this.db.knex, 'projection_stream_positions'))
      ? await this.db.knex('projection_stream_positions').select('projection').max('global_position as position').groupBy('projection')
      : [];
    const applied = new Map(rows.map((row) => [row.projection, Number(row.position)]));
    const marks = await this.rebuildMarks();
    return [...this.workers.values()].map((worker) => {
      const { name } = worker.projection;
      const position = Math.max(worker.position, applied.get(name) ?? 0);
      const lag = owed instanceof Map ? (owed.get(name) ?? 0) : Math.max(0, head - position);
      const lastError = worker.lastError ?? (owed instanceof Map ? null : owed);
      const state = worker.state === 'stopped' && consumedElsewhere.has(name) ? 'running' : worker.state;
      const status: ProjectionStatus = { name, position, head, lag, state, lastError };
      // Whichever node rebuilds it: on every node the projection shows as rebuilding, so a second rebuild is refused.
      const mark = marks.get(name);
      if (mark && worker.state !== 'rebuilding') return { ...status, state: 'rebuilding', lastError: this.stoppedRebuildNote(name, mark) ?? status.lastError };
      return status;
    });
  }

  /**
   * Per projection: what it still owes (see status), or the reason where the bus cannot tell; and
   * the projections whose group has a member consuming now (on any node).
   */
  private async askBus(head: number): Promise<{ owed: Map<string, number> | string; consumedElsewhere: Set<string> }> {
    const workers = [...this.workers.values()];
    const waitMs = this.options.busAnswerWaitMs ?? 2_000;
    // One question at a time, shared by every status asked meanwhile: with the broker down, each
    // takes kafkajs's retries (seconds), and `/metrics` scrapes and dashboards would pile them up.
    this.busAnswer ??= this.questionToBus(workers.map((worker) => this.groupOf(worker))).finally(() => (this.busAnswer = null));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), waitMs)));
    try {
      const answer = await Promise.race([this.busAnswer, late]);
      if (answer === 'late') {
        return { owed: `lag counted from the checkpoints: the bus has not said what the consumers owe within ${waitMs} ms`, consumedElsewhere: new Set() };
      }
      const published = answer.published === null ? head : Math.min(head, answer.published);
      return {
        owed: new Map(workers.map((worker) => [worker.projection.name, head - published + (answer.backlog.get(this.groupOf(worker)) ?? 0)])),
        consumedElsewhere: new Set(workers.filter((worker) => answer.consuming.has(this.groupOf(worker))).map((worker) => worker.projection.name)),
      };
    } catch (error) {
      return { owed: `lag counted from the checkpoints: the bus could not say what the consumers owe (${boundedErrorMessage(error)})`, consumedElsewhere: new Set() };
    } finally {
      clearTimeout(timer);
    }
  }

  /** What the relay has published and, per group, the messages not acknowledged and whether a member consumes. */
  private async questionToBus(groups: readonly string[]): Promise<BusAnswer> {
    const published = this.options.publishedPosition ? await this.options.publishedPosition() : null;
    const [backlog, consuming] = await Promise.all([this.bus.backlog(groups), this.bus.consumingGroups(groups)]);
    return { published, backlog, consuming };
  }

  /** The projections a node is rebuilding (`projection_rebuilds`), by name; none before any node made the table. */
  private async rebuildMarks(executor: Knex | Knex.Transaction = this.db.knex, names?: readonly string[]): Promise<Map<string, RebuildMark>> {
    // Once made, the table stays: asked until a node (this one's start, or a worker) made it.
    this.rebuildsTableMade ||= await relationsExist(executor, 'projection_rebuilds');
    return this.rebuildsTableMade ? readRebuildMarks(executor, names) : new Map();
  }

  /** Polls the per-stream checkpoints of the projections that handle the write's types. */
  async settle(write: AppendedWrite, timeoutMs: number): Promise<readonly string[]> {
    const handlers = [...this.workers.values()].filter((worker) => write.types.some((type) => worker.projection.eventTypes.includes(type)));
    // Other nodes may run the consumers (an API node runs none), so wait for every projection
    // that handles the write, unless this node knows it failed or is being rebuilt.
    let concerned = handlers.filter((worker) => worker.state !== 'failed' && worker.state !== 'rebuilding').map((worker) => worker.projection.name);
    // Those not waited for may not have the write: answered, as settle's contract says.
    const notWaitedFor = () => handlers.map((worker) => worker.projection.name).filter((name) => !concerned.includes(name));
    if (concerned.length === 0) return notWaitedFor();
    const deadline = Date.now() + timeoutMs;
    let marksRead = false;
    for (;;) {
      // Until a node running the consumers has made the checkpoints' table, nothing is applied: a wait like any lag.
      const applied = await this.checkpointReads.atNextTick(concerned.map((name) => checkpointKey(name, write.streamId)));
      let behind = concerned.filter((name) => (applied.get(checkpointKey(name, write.streamId))?.streamVersion ?? -1) < write.streamVersion);
      if (behind.length > 0 && !marksRead) {
        // Nor for one another node is rebuilding: its consumers hold every batch until it ends.
        // Asked once, and only of a write not applied at once.
        marksRead = true;
        const marks = await this.rebuildMarks(this.db.knex, behind);
        concerned = concerned.filter((name) => !marks.has(name));
        behind = behind.filter((name) => !marks.has(name));
      }
      if (behind.length === 0) return notWaitedFor();
      if (Date.now() > deadline) throw new ProjectionWaitTimeoutError(write.position, timeoutMs, behind, [...behind, ...notWaitedFor()]);
    }
  }

  /**
   * Kafka keeps no order across streams, so no per-stream checkpoint says "everything through
   * `position`": instead the relay has published through it and every projection's consumer group
   * has acknowledged all it was sent (a group acknowledges a batch after its transaction commits).
   */
  async caughtUp(position: number, timeoutMs: number): Promise<boolean> {
    // A rebuild empties its tables first: until it has replayed the log, what was written is not all readable.
    if ([...this.workers.values()].some((worker) => worker.state === 'rebuilding')) return false;
    if ((await this.rebuildMarks(this.db.knex, [...this.workers.keys()])).size > 0) return false;
    const groups = [...this.workers.values()]
      .filter((worker) => worker.state !== 'failed')
      .map((worker) => this.groupOf(worker));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const [published, backlog] = await Promise.all([this.publishedThrough(position), this.backlogReads.atNextTick(groups)]);
      if (published && [...backlog.values()].every((owed) => owed === 0)) return true;
      if (Date.now() > deadline) return false;
    }
  }

  /**
   * As caughtUp, for one projection's consumer group. With `streamId` (the stream of the write
   * ending at `position`, a lock's mark) the write is applied once the projection's checkpoint of
   * that stream is at `position` or past it, however much its group owes of other streams: under
   * the pipeline's appends a group seldom owes nothing, and the next holder of a marked lock would
   * be refused long after the marked write was applied. The group's drain still answers too: a
   * checkpoint counts only the events of the projection's types, so one that handles none of the
   * write's last events never shows its position.
   */
  async projectionReached(name: string, position: number, timeoutMs: number, streamId?: string): Promise<boolean> {
    const worker = this.workers.get(name);
    if (!worker) throw new Error(`unknown projection ${name}`);
    const rebuilding = async () => worker.state === 'rebuilding' || (await this.rebuildMarks(this.db.knex, [name])).size > 0;
    if (await rebuilding()) return false;
    // Nothing to wait for: only a rebuild leaves the read model short of the log's start.
    if (position <= 0) return true;
    const group = this.groupOf(worker);
    const deadline = Date.now() + timeoutMs;
    const checkpoints = streamId === undefined ? [] : [checkpointKey(name, streamId)];
    for (;;) {
      // The three read side by side, at their ticks (shared with the node's other waiters).
      const [applied, published, backlog] = await Promise.all([this.checkpointReads.atNextTick(checkpoints), this.publishedThrough(position), this.backlogReads.atNextTick([group])]);
      // A rebuild begun meanwhile replays the stream into tables it emptied: not reached until it ends.
      if (streamId !== undefined && (applied.get(checkpointKey(name, streamId))?.globalPosition ?? -1) >= position) return !(await rebuilding());
      if (published && (backlog.get(group) ?? 0) === 0) return true;
      if (Date.now() > deadline) return false;
    }
  }

  /**
   * Empties the projection's tables and checkpoints, replays the whole log from the event store in
   * global order, then resumes consuming: the bus redelivers from its committed offsets and the
   * per-stream checkpoints skip what the replay already applied.
   *
   * Other nodes consume the same groups, and their batches must not be applied meanwhile: an event
   * applied to the emptied tables ahead of the replay sets its stream's checkpoint, and the replay
   * then skips that stream's earlier events as duplicates (their effect lost). So the rebuild
   * marks the projection in `projection_rebuilds` in the transaction that empties it, taking the
   * projection's lock exclusively (it waits for the batches in flight); every consumer's batch
   * looks for the mark under the same lock, shared, and waits while it is there. The mark goes
   * when the replay has applied the whole log. A rebuild that stops half-way (its node died)
   * leaves the mark, so the projection stays held until a rebuild runs to its end: status shows it
   * as rebuilding, with the stop named in its last error once no batch came for rebuildStaleMs,
   * and a running node then takes it over (takeOverStoppedRebuilds).
   *
   * The mark carries the rebuild's id, and each replayed batch renews it in its own transaction,
   * under the lock: a batch that finds the mark no longer its rebuild's (another node took this
   * rebuild for stopped and took it over) rolls back and ends the replay
   * (ProjectionRebuildTakenOverError). Else a node that was only slow would go on applying its
   * replay to the tables the other emptied, and its per-stream checkpoints would make the other's
   * replay skip those streams' earlier events.
   */
  async rebuild(name: string, onProgress?: (done: number, total: number) => void): Promise<void> {
    const worker = this.workers.get(name);
    if (!worker) throw new Error(`unknown projection ${name}; known: ${[...this.workers.keys()].join(', ')}`);
    if (this.ownRebuilds.has(name)) throw new ProjectionRebuildConflictError(`projection ${name} is already rebuilding on this node (${this.nodeName})`);
    const rebuildId = randomUUID();
    this.ownRebuilds.set(name, rebuildId);
    try {
      await this.rebuildAs(worker, rebuildId, onProgress);
    } finally {
      this.ownRebuilds.delete(name);
    }
  }

  private async rebuildAs(worker: Worker, rebuildId: string, onProgress?: (done: number, total: number) => void): Promise<void> {
    const name = worker.projection.name;
    await migrateProjectionStreamPositions(this.db.knex);
    // Refused before this node's consumer stops (its group would rebalance for nothing); asked
    // again under the lock below, where two nodes starting at once agree.
    this.refuseRebuildUnderWay(name, (await this.rebuildMarks(this.db.knex, [name])).get(name));
    const wasRunning = worker.consumer !== null;
    const previousState = worker.state;
    await this.stopConsumer(worker);
    worker.state = 'rebuilding';
    try {
      await this.db.knex.transaction(async (trx) => {
        await lockProjectionStreams(trx, name, [], true);
        this.refuseRebuildUnderWay(name, (await this.rebuildMarks(trx, [name])).get(name));
        await trx('projection_rebuilds')
          .insert({ projection: name, node: this.nodeName, rebuild_id: rebuildId, started_at: trx.fn.now(), heartbeat_at: trx.fn.now() })
          .onConflict('projection')
          .merge(['node', 'rebuild_id', 'started_at', 'heartbeat_at']);
        for (const table of worker.projection.tables) await trx(table).delete();
        await trx('projection_stream_positions').where({ projection: name }).delete();
      });
    } catch (error) {
      // Nothing was emptied: the projection goes on as it was.
      worker.state = previousState;
      if (wasRunning && !this.stopping) await this.consume(worker);
      throw error;
    }
    try {
      const total = await this.store.headPosition();
      onProgress?.(0, total);
      let after = 0;
      for (;;) {
        // A stopping node ends its replay between batches, as the embedded runner does.
        if (this.stopping) throw new ProjectionRebuildStoppedError(name, 'a running node takes the rebuild over and replays the log from 0');
        const batch = await this.store.readAll({ after, limit: this.options.rebuildBatchSize ?? 500 });
        if (batch.length === 0) break;
        await this.apply(worker, batch, { replaying: rebuildId });
        after = batch[batch.length - 1].globalPosition;
        onProgress?.(Math.min(after, total), total);
      }
      await this.db.knex('projection_rebuilds').where({ projection: name, rebuild_id: rebuildId }).delete();
    } catch (error) {
      if (error instanceof ProjectionRebuildStoppedError) {
        // Its mark is dated back so that a running node takes the rebuild over at its next look,
        // not after rebuildStaleMs. Best effort: the database may be closing too.
        await this.db.knex('projection_rebuilds').where({ projection: name, rebuild_id: rebuildId }).update({ heartbeat_at: new Date(0) }).catch(() => undefined);
        worker.state = 'stopped';
        throw error;
      }
      if (error instanceof ProjectionRebuildTakenOverError) {
        // The other node's rebuild holds the projection now: this node's consumer goes back to
        // waiting on its mark, as every other node's does.
        this.options.log?.warn({ projection: name, by: error.by }, 'projection rebuild taken over by another node; this replay ended');
        worker.state = previousState;
        if (wasRunning && !this.stopping) await this.consume(worker);
        throw error;
      }
      // Half replayed: the mark stays and holds every node's consumers until a rebuild ends.
      worker.state = 'failed';
      worker.lastError = `rebuild failed: ${boundedErrorMessage(error)}`;
      throw error;
    }
    worker.state = 'stopped';
    this.options.log?.info({ projection: name }, 'projection rebuilt');
    if (wasRunning && !this.stopping) await this.consume(worker);
  }

  private async stopConsumer(worker: Worker): Promise<void> {
    worker.consumerStopping = true;
    try {
      await worker.consumer?.stop();
      worker.consumer = null;
    } finally {
      worker.consumerStopping = false;
    }
  }

  private groupOf(worker: Worker): string {
    return `${this.options.groupPrefix ?? 'factlog'}.projection.${worker.projection.name}`;
  }

  private async consume(worker: Worker): Promise<void> {
    worker.consumer = await this.bus.consume({
      group: this.groupOf(worker),
      types: worker.projection.eventTypes,
      handler: async (batch) => {
        for (;;) {
          try {
            await this.apply(worker, batch);
            worker.state = 'running';
            worker.lastError = null;
            return;
          } catch (error) {
            if (error instanceof ProjectionRebuildingError && !this.stopping && !worker.consumerStopping) {
              // The bus heartbeats while a handler runs: the batch waits here, unacknowledged.
              if (worker.state !== 'rebuilding') this.options.log?.info({ projection: worker.projection.name, node: error.mark.node }, 'projection is being rebuilt on another node; its batches wait');
              worker.state = 'rebuilding';
              await new Promise((resolve) => setTimeout(resolve, this.options.pollMs ?? REBUILD_WAIT_POLL_MS));
              continue;
            }
            worker.lastError = boundedErrorMessage(error);
            this.options.log?.warn({ projection: worker.projection.name, error: worker.lastError }, 'projection batch failed; it will be redelivered');
            throw error;
          }
        }
      },
    });
    worker.state = 'running';
  }

  /**
   * One transaction per batch: rows and per-stream checkpoints together, stale versions skipped.
   * `replaying`: the id of the rebuild whose replay this batch is (see rebuild).
   */
  private async apply(worker: Worker, batch: readonly RecordedEvent[], options: { replaying?: string } = {}): Promise<void> {
    const handled = new Set(worker.projection.eventTypes);
    const relevant = batch.filter((event) => handled.has(event.type));
    // A replayed batch renews its rebuild's mark even when it holds nothing for the projection.
    if (relevant.length === 0 && options.replaying === undefined) return;
    const name = worker.projection.name;
    // As projection work, its statements go prepared (src/db/serverPrepared.ts).
    await inProjections(() => this.db.knex.transaction(async (trx) => {
      const streams = [...new Set(relevant.map((event) => event.streamId))];
      // Per stream: consumers of one projection on other partitions go on in parallel, unless the
      // batch holds a type that must be applied alone.
      const exclusive = relevant.some((event) => worker.projection.exclusiveTypes?.includes(event.type) === true);
      await lockProjectionStreams(trx, name, streams, exclusive);
      // Under the projection's lock, which a rebuild takes exclusively to mark it: no batch slips in between.
      if (options.replaying === undefined) {
        // The table is there: start() made it before the first batch.
        const mark = (await readRebuildMarks(trx, [name])).get(name);
        if (mark) throw new ProjectionRebuildingError(mark);
      } else {
        // Read, not renewed here: a write would give the transaction an id before its handlers
        // run, and hold back every global reader of the log until it commits. Under the lock,
        // which a takeover takes exclusively, the mark cannot change before this commits.
        const mark = (await readRebuildMarks(trx, [name])).get(name);
        if (mark?.rebuildId !== options.replaying) throw new ProjectionRebuildTakenOverError(name, mark?.node ?? null);
      }
      const stored: { stream_id: string; stream_version: string | number }[] = await trx('projection_stream_positions')
        .where({ projection: name })
        .whereIn('stream_id', streams)
        .select('stream_id', 'stream_version');
      const versions = new Map(stored.map((row) => [row.stream_id, Number(row.stream_version)]));
      const advanced = new Map<string, RecordedEvent>();
      const fresh: RecordedEvent[] = [];
      for (const event of relevant) {
        if (event.streamVersion <= (versions.get(event.streamId) ?? -1)) continue; // a duplicate
        fresh.push(event);
        versions.set(event.streamId, event.streamVersion);
        advanced.set(event.streamId, event);
      }
      if (advanced.size > 0) {
        await applyEvents(worker.projection, trx, fresh);
        for (const event of fresh) worker.position = Math.max(worker.position, event.globalPosition);
        // One statement for the batch's checkpoints: the last applied event of each stream.
        await trx('projection_stream_positions')
          .insert(
            [...advanced.values()].map((event) => ({
              projection: name,
              stream_id: event.streamId,
              stream_version: event.streamVersion,
              global_position: event.globalPosition,
              updated_at: new Date(),
            })),
          )
          .onConflict(['projection', 'stream_id'])
          .merge(['stream_version', 'global_position', 'updated_at']);
      }
      // The replay's sign of life, renewed with the batch it commits (read as checked above).
      if (options.replaying !== undefined) await trx('projection_rebuilds').where({ projection: name, rebuild_id: options.replaying }).update({ heartbeat_at: trx.fn.now() });
    }));
  }
}


/** The rows of `projection_rebuilds` (of `names`, or all), by projection. */
async function readRebuildMarks(executor: Knex | Knex.Transaction, names?: readonly string[]): Promise<Map<string, RebuildMark>> {
  // Every column: a table an older release made, not yet given rebuild_id by a start of this one,
  // is read by a status all the same (`projections list` does not migrate).
  const query = executor('projection_rebuilds').select('*', executor.raw(`extract(epoch FROM now() - heartbeat_at) * 1000 AS idle_ms`));
  if (names) query.whereIn('projection', names);
  const rows: Array<{ projection: string; node: string; started_at: Date | string; heartbeat_at: Date | string; idle_ms: string | number; rebuild_id?: string | null }> = await query;
  return new Map(
    rows.map((row) => [row.projection, { node: row.node, startedAt: new Date(row.started_at), heartbeatAt: new Date(row.heartbeat_at), idleMs: Number(row.idle_ms), rebuildId: row.rebuild_id ?? null }]),
  );
}

/** The key of a projection's checkpoint of one stream in the runner's polled reads. */
function checkpointKey(projection: string, streamId: string): string {
  return `${projection}\0${streamId}`;
}
