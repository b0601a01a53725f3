import t, { type Test } from 'tap';
import type { Knex } from 'knex';
import type { Bus, BusConsumer, BusConsumerOptions } from '../../src/bus/port.js';
import { conceptsProjection } from '../../projections/concepts.js';
import { factsProjection } from '../../projections/facts.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { openScratchPostgres, type Database } from '../../src/db/database.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { BusProjectionRunner, migrateProjectionStreamPositions } from '../../src/projection/busRunner.js';
import { lockProjectionStreams } from '../../src/projection/lock.js';
import type { Projection } from '../../src/projection/types.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';
import { openStore, thing, waitUntil } from '../eventstore/contract.js';

/** A bus that hands each batch to whoever calls `deliver`, as one partition's consumer would. */
class HandOverBus implements Bus {
  readonly consumers: BusConsumerOptions[] = [];
  /** Consumers started in all (a consumer stopped and started again counts twice). */
  starts = 0;
  async consume(options: BusConsumerOptions): Promise<BusConsumer> {
    this.starts += 1;
    this.consumers.push(options);
    return { stop: async () => void this.consumers.splice(this.consumers.indexOf(options), 1) };
  }
  deliver(events: RecordedEvent[]): Promise<void> {
    const [consumer] = this.consumers;
    return consumer.handler(events.filter((event) => consumer.types.includes(event.type)));
  }
  async backlog(groups: readonly string[]) {
    return new Map(groups.map((group) => [group, 0]));
  }
  async consumingGroups(groups: readonly string[]) {
    return new Set(groups.filter((group) => this.consumers.some((consumer) => consumer.group === group)));
  }
  async close() {}
}

/** A HandOverBus whose consumer's stop waits for the batch in flight, as Kafka's disconnect does. */
class DrainingBus extends HandOverBus {
  private readonly inFlight = new Set<Promise<void>>();
  override async consume(options: BusConsumerOptions): Promise<BusConsumer> {
    const { stop } = await super.consume(options);
    return {
      stop: async () => {
        await stop();
        await Promise.allSettled([...this.inFlight]);
      },
    };
  }
  override deliver(events: RecordedEvent[]): Promise<void> {
    const delivery = super.deliver(events);
    this.inFlight.add(delivery);
    void delivery.catch(() => undefined).finally(() => this.inFlight.delete(delivery));
    return delivery;
  }
}

const REPO = 'repo-1';
const fact = (id: string) => ({ fact_id: id, content: `Fact ${id}.`, content_hash: `hash-${id}`, source_text: `Source text of ${id}.`, chunk_index: 0 });

/** Locks that backends of this database wait for. */
async function waitingLocks(db: Database): Promise<number> {
  const rows = (await db.knex.raw(`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND a.datname = current_database()`)) as { rows: Array<{ n: number }> };
  return rows.rows[0].n;
}

/**
 * Runs `body` with a transaction that holds rows, rolled back at the latest when `body` ends (it
 * holds back the global readers of every test on the server while it runs).
 */
async function withHolder(db: Database, body: (holder: Knex.Transaction) => Promise<void>): Promise<void> {
  const holder = await db.knex.transaction();
  try {
    await body(holder);
  } finally {
    if (!holder.isCompleted()) await holder.rollback();
  }
}

interface Node {
  bus: HandOverBus;
  runner: BusProjectionRunner;
}

/**
 * Two nodes of the distributed tier on one database, each with `projection`'s consumer, and
 * events appended to the log for them to be handed.
 */
async function openNodes(t: Test, projection: Projection): Promise<{ scratch: Database; nodes: [Node, Node]; append(streamId: string, type: string, data: Record<string, unknown>): Promise<RecordedEvent> }> {
  const { scratch, second } = await scratchPostgresWithSecondPool(t, 'factlog_bus_runner', 4);
  await migrateEventStore(scratch.knex);
  await migrateReadModels(scratch.knex);
  const store = createPostgresEventStore(scratch, { schemas: await EventSchemaRegistry.load() });
  const node = async (db: Database): Promise<Node> => {
    const bus = new HandOverBus();
    const runner = new BusProjectionRunner(bus, store, db, [projection]);
    await runner.start();
    return { bus, runner };
  };
  const nodes: [Node, Node] = [await node(scratch), await node(second)];
  t.teardown(async () => {
    for (const { runner } of nodes) await runner.stop();
    await store.close();
  });
  const append = async (streamId: string, type: string, data: Record<string, unknown>) => {
    const metadata = { repositoryId: REPO, actor: 'system:test', causationId: null, correlationId: null };
    const { lastPosition } = await store.append(streamId, [{ type, data, metadata }], 'any');
    // By its stream: the global read waits for the transactions of other tests on the server.
    const event = (await store.readStream(streamId)).find((recorded) => recorded.globalPosition === lastPosition);
    if (!event) throw new Error(`the event appended at ${lastPosition} is not in ${streamId}`);
    return event;
  };
  return { scratch, nodes, append };
}

/**
 * Node 0 applies `links` (a source's links of fact fb) while node 1 applies `other` (fb's merge
 * into fa, or the creation of the linked concept). The link insert is held up by an uncommitted
 * row of the same key (`hold`), so the link batch has read what it needs (fb's survivors, none)
 * before `other` is handed over: `other` must wait for it to commit, or it would move or count
 * fb's links without the new one.
 */
async function linkWhileApplying(t: Test, scratch: Database, nodes: [Node, Node], links: RecordedEvent, other: RecordedEvent, hold: (trx: Knex.Transaction) => Promise<void>): Promise<void> {
  await withHolder(scratch, async (holder) => {
    await hold(holder);
    const linking = nodes[0].bus.deliver([links]);
    await waitUntil(async () => (await waitingLocks(scratch)) === 1, 10_000, 'the link batch to wait for the held row');
    let applied = false;
    const applying = nodes[1].bus.deliver([other]).then(() => void (applied = true));
    // It either finishes at once or waits for a lock the link batch holds.
    await waitUntil(async () => applied || (await waitingLocks(scratch)) === 2, 10_000, `${other.type} to finish or wait`);
    t.equal(applied, false, `${other.type} waits until the batch that links the fact has committed`);
    await holder.rollback();
    await Promise.all([linking, applying]);
  });
}

t.test('facts: a source linked to a fact while it merges ends on the survivor', async (t) => {
  const { scratch, nodes, append } = await openNodes(t, factsProjection);
  await nodes[0].bus.deliver([await append('source-s1', 'FactsExtracted', { model_id: 'local', facts: [fact('fa'), fact('fb')] })]);
  const links = await append('source-s2', 'FactsExtracted', { model_id: 'local', facts: [fact('fb')] });
  const merge = await append('fact-fb', 'FactMergedInto', { survivor_id: 'fa', similarity: 0.97, source_id: 's1', catchup: false });
  await linkWhileApplying(t, scratch, nodes, links, merge, async (trx) => {
    await trx('fact_sources').insert({ fact_id: 'fb', source_id: 's2', repository_id: REPO, chunk_index: 0, source_text: 'x', sentence_index: -1 });
  });
  t.same(await scratch.knex('fact_sources').orderBy(['fact_id', 'source_id']).select('fact_id', 'source_id'), [
    { fact_id: 'fa', source_id: 's1' },
    { fact_id: 'fa', source_id: 's2' },
  ], 'both sources on the survivor, none on the merged fact');
});

t.test('facts: two sources\' extractions are applied side by side', async (t) => {
  const { scratch, nodes, append } = await openNodes(t, factsProjection);
  const first = await append('source-s1', 'FactsExtracted', { model_id: 'local', facts: [fact('fa')] });
  const second = await append('source-s2', 'FactsExtracted', { model_id: 'local', facts: [fact('fb')] });
  await withHolder(scratch, async (holder) => {
    await holder('fact_sources').insert({ fact_id: 'fa', source_id: 's1', repository_id: REPO, chunk_index: 0, source_text: 'x', sentence_index: -1 });
    const held = nodes[0].bus.deliver([first]);
    await waitUntil(async () => (await waitingLocks(scratch)) === 1, 10_000, 'the first batch to wait for the held row');
    await nodes[1].bus.deliver([second]);
    t.same(await scratch.knex('fact_sources').pluck('fact_id'), ['fb'], 'the second is applied while the first waits');
    await holder.rollback();
    await held;
  });
  t.same(await scratch.knex('fact_sources').orderBy('fact_id').pluck('fact_id'), ['fa', 'fb']);
});

t.test('concepts: a fact linked to a concept while the fact merges ends on the survivor, counted once', async (t) => {
  const { scratch, nodes, append } = await openNodes(t, conceptsProjection);
  const concept = 'c1';
  await nodes[0].bus.deliver([
    await append(`concept-${concept}`, 'ConceptCreated', { canonical_name: 'Polonium', context: 'chemical', ontology_class: null, aliases: [], source_id: 's1' }),
  ]);
  await nodes[0].bus.deliver([
    await append('source-s1', 'ConceptsExtracted', { model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1, links: [{ fact_id: 'fa', concept_ids: [concept] }] }),
  ]);
  const links = await append('source-s2', 'ConceptsExtracted', {
    model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1, links: [{ fact_id: 'fb', concept_ids: [concept] }],
  });
  const merge = await append('fact-fb', 'FactMergedInto', { survivor_id: 'fa', similarity: 0.97, source_id: 's1', catchup: false });
  await linkWhileApplying(t, scratch, nodes, links, merge, async (trx) => {
    await trx('fact_concepts').insert({ fact_id: 'fb', concept_id: concept, repository_id: REPO, source_id: 's2' });
  });
  t.same(await scratch.knex('fact_concepts').orderBy('fact_id').pluck('fact_id'), ['fa'], 'the link moved to the survivor');
  t.equal((await scratch.knex('concepts').where({ id: concept }).first('fact_count'))?.fact_count, 1, 'the concept counts the survivor once');
});

t.test('concepts: links written while their concept is created are counted', async (t) => {
  const { scratch, nodes, append } = await openNodes(t, conceptsProjection);
  const concept = 'c2';
  const links = await append('source-s1', 'ConceptsExtracted', {
    model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1, links: [{ fact_id: 'fa', concept_ids: [concept] }, { fact_id: 'fb', concept_ids: [concept] }],
  });
  const created = await append(`concept-${concept}`, 'ConceptCreated', { canonical_name: 'Radium', context: 'chemical', ontology_class: null, aliases: [], source_id: 's1' });
  await linkWhileApplying(t, scratch, nodes, links, created, async (trx) => {
    await trx('fact_concepts').insert({ fact_id: 'fb', concept_id: concept, repository_id: REPO, source_id: 's1' });
  });
  t.equal((await scratch.knex('concepts').where({ id: concept }).first('fact_count'))?.fact_count, 2, 'the concept counts both links');
});

/** Counts ThingHappened events by name in thing_counts. */
const thingCounts: Projection = {
  name: 'counts',
  eventTypes: ['ThingHappened'],
  tables: ['thing_counts'],
  async apply(trx: Knex.Transaction, event: RecordedEvent) {
    await trx.raw(`INSERT INTO thing_counts (name, count) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET count = thing_counts.count + 1`, [String(event.data.name)]);
  },
};

/**
 * A store on a fresh database with the table of thingCounts, and the counts it holds by name;
 * unless `appended` is false, thing-b's event and then thing-a's in the log.
 */
async function countsFixture(t: Test, { appended = true } = {}) {
  const fixture = await openStore(() => openScratchPostgres(undefined, 'factlog_bus_rebuild'));
  t.teardown(() => fixture.close());
  await fixture.db.knex.raw('CREATE TABLE thing_counts (name text PRIMARY KEY, count int NOT NULL)');
  const counts = async () => Object.fromEntries((await fixture.db.knex('thing_counts').orderBy('name')).map((row) => [row.name, row.count]));
  if (appended) {
    await fixture.store.append('thing-b', [thing('b')], 'no_stream');
    await fixture.store.append('thing-a', [thing('a')], 'no_stream');
  }
  return { fixture, counts };
}

/** A projection counting like thingCounts, whose replay of the event named `b` waits until `open()` is called. */
function gatedProjection() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let reached!: () => void;
  const reachedGate = new Promise<void>((resolve) => (reached = resolve));
  const projection: Projection = {
    ...thingCounts,
    async apply(trx, event) {
      if (event.data.name === 'b') {
        reached();
        await opened;
      }
      await thingCounts.apply(trx, event);
    },
  };
  return { projection, reachedGate, open };
}

function recordingLog() {
  const messages: string[] = [];
  return { messages, log: { info: (_details: Record<string, unknown>, message: string) => void messages.push(message), warn: (_details: Record<string, unknown>, message: string) => void messages.push(message) } };
}

t.test('bus runner: a rebuild on one node holds the batches of every node until its replay ends, so the replay skips no earlier event', async (t) => {
  const { fixture, counts } = await countsFixture(t, { appended: false });
  const bus = new HandOverBus();
  const { messages, log } = recordingLog();
  const worker = new BusProjectionRunner(bus, fixture.store, fixture.db, [thingCounts], { pollMs: 5, log, nodeName: 'worker' });
  t.teardown(() => worker.stop());
  await worker.start();
  await fixture.store.append('thing-b', [thing('b')], 'no_stream');
  await fixture.store.append('thing-a', [thing('a')], 'no_stream');
  await bus.deliver(await fixture.store.readAll());
  t.same(await counts(), { a: 1, b: 1 });

  // Another node rebuilds; its replay stops at thing-b, before it reaches thing-a's first event.
  const gate = gatedProjection();
  const rebuilder = new BusProjectionRunner(new HandOverBus(), fixture.store, fixture.db, [gate.projection], { pollMs: 5, nodeName: 'rebuilder', rebuildBatchSize: 1 });
  const rebuilt = rebuilder.rebuild('counts');
  await gate.reachedGate;
  t.match(await worker.status(), [{ name: 'counts', state: 'rebuilding' }], 'every node shows the projection as rebuilding');

  // Meanwhile thing-a's second event reaches the worker node (its first was acknowledged before).
  const second = await fixture.store.append('thing-a', [thing('a')], 0);
  const delivered = bus.deliver(await fixture.store.readAll({ after: second.lastPosition - 1 }));
  await waitUntil(() => messages.includes('projection is being rebuilt on another node; its batches wait'), 10_000, 'the batch to wait');
  t.same(await fixture.db.knex('projection_stream_positions').where({ projection: 'counts', stream_id: 'thing-a' }), [], 'the waiting batch set no checkpoint the replay would skip by');

  gate.open();
  await rebuilt;
  await delivered;
  t.same(await counts(), { a: 2, b: 1 }, "thing-a's first event replayed, its second applied once");
  t.same(await fixture.db.knex('projection_rebuilds'), [], 'the mark is gone');
  t.match(await worker.status(), [{ name: 'counts', state: 'running' }]);
});

t.test('bus runner: a second node may not rebuild a projection under rebuild; a rebuild that stopped half-way holds the consumers until one ends', async (t) => {
  const { fixture, counts } = await countsFixture(t);
  const gate = gatedProjection();
  const first = new BusProjectionRunner(new HandOverBus(), fixture.store, fixture.db, [gate.projection], { pollMs: 5, nodeName: 'first', rebuildBatchSize: 1 });
  const rebuilt = first.rebuild('counts');
  await gate.reachedGate;
  // A consuming node asked to rebuild it meanwhile refuses at once, before its consumer stops (its group would rebalance for nothing).
  const consumingBus = new HandOverBus();
  const consuming = new BusProjectionRunner(consumingBus, fixture.store, fixture.db, [thingCounts], { pollMs: 5, nodeName: 'consuming' });
  await consuming.start();
  await t.rejects(consuming.rebuild('counts'), { name: 'ProjectionRebuildConflictError', message: /^projection counts is already rebuilding on first \(since / });
  t.equal(consumingBus.starts, 1, 'its consumer was neither stopped nor started again');
  t.equal(consumingBus.consumers.length, 1);
  await consuming.stop();
  gate.open();
  await rebuilt;
  t.same(await counts(), { a: 1, b: 1 }, 'the first rebuild ran to its end, undisturbed');

  // Two nodes starting at once: the mark another commits after this one's first look is found under the projection's lock.
  const second = new BusProjectionRunner(new HandOverBus(), fixture.store, fixture.db, [thingCounts], { pollMs: 5, nodeName: 'second' });
  let raced: Promise<void> | null = null;
  await fixture.db.knex.transaction(async (trx) => {
    await lockProjectionStreams(trx, 'counts', [], true);
    await trx('projection_rebuilds').insert({ projection: 'counts', node: 'racer', rebuild_id: 'racer-1', started_at: trx.fn.now(), heartbeat_at: trx.fn.now() });
    raced = second.rebuild('counts');
    raced.catch(() => undefined);
    await waitUntil(async () => (await waitingLocks(fixture.db)) === 1, 10_000, 'the second rebuild to wait for the lock');
  });
  await t.rejects(raced!, { name: 'ProjectionRebuildConflictError', message: /already rebuilding on racer/ });
  t.same(await counts(), { a: 1, b: 1 }, 'the refused rebuild emptied nothing');
  await fixture.db.knex('projection_rebuilds').where({ projection: 'counts' }).delete();

  // A node that died half-way through a rebuild leaves its mark, last seen long ago.
  await fixture.db.knex('projection_rebuilds').insert({ projection: 'counts', node: 'gone', started_at: new Date(Date.now() - 3_600_000), heartbeat_at: new Date(Date.now() - 3_000_000) });
  const [status] = await second.status();
  t.equal(status.state, 'rebuilding');
  t.match(status.lastError, /the rebuild by gone .* stopped before its end/, 'status says it stopped');
  const progress: Array<[number, number]> = [];
  await second.rebuild('counts', (done, total) => progress.push([done, total]));
  t.same(await counts(), { a: 1, b: 1 }, 'a new rebuild took the stopped one over');
  const head = await fixture.store.headPosition();
  t.same(progress[0], [0, head], 'its progress began at 0 once its tables were emptied (the API answers then)');
  t.same(progress.at(-1), [head, head]);
  t.same(await fixture.db.knex('projection_rebuilds'), [], 'and its mark went at its end');
  const bus = new HandOverBus();
  const { messages, log } = recordingLog();
  const worker = new BusProjectionRunner(bus, fixture.store, fixture.db, [thingCounts], { pollMs: 5, log, nodeName: 'worker' });
  await worker.start();
  await bus.deliver(await fixture.store.readAll());
  t.same(await counts(), { a: 1, b: 1 }, 'batches the bus delivers again are absorbed as duplicates');

  // Stopping a node ends its batches' wait: the bus redelivers them to whoever consumes next.
  await fixture.db.knex('projection_rebuilds').insert({ projection: 'counts', node: 'gone', started_at: new Date(), heartbeat_at: new Date() });
  const third = await fixture.store.append('thing-c', [thing('c')], 'no_stream');
  const held = bus.deliver(await fixture.store.readAll({ after: third.lastPosition - 1 }));
  await waitUntil(async () => (await worker.status())[0]?.state === 'rebuilding' && messages.filter((message) => message.includes('its batches wait')).length === 1, 10_000, 'the batch to wait');
  await worker.stop();
  await t.rejects(held, { name: 'ProjectionRebuildingError' }, 'the batch was not acknowledged');
  t.same(await counts(), { a: 1, b: 1 }, 'nor applied');
});

/** The store with its global reads held at the `holdAt`th call (1-based) until `release()`: a rebuild's replay stalled between two batches. */
function stallingStore(store: EventStore, holdAt: number) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let stalled!: () => void;
  const stalledAt = new Promise<void>((resolve) => (stalled = resolve));
  let reads = 0;
  const stalling: EventStore = {
    ...store,
    readAll: async (options) => {
      reads += 1;
      if (reads === holdAt) {
        stalled();
        await released;
      }
      return store.readAll(options);
    },
  };
  return { store: stalling, stalledAt, release };
}

t.test('bus runner: a rebuild taken over while its node was only slow ends at its next batch, which it rolls back; the other replay stands', async (t) => {
  const { fixture, counts } = await countsFixture(t);

  // The slow node replays thing-b, then stalls before reading its next batch (a long pause, a cut-off network).
  const stalling = stallingStore(fixture.store, 2);
  const { messages, log } = recordingLog();
  const slow = new BusProjectionRunner(new HandOverBus(), stalling.store, fixture.db, [thingCounts], { nodeName: 'slow', rebuildBatchSize: 1, log });
  const slowRebuild = slow.rebuild('counts');
  slowRebuild.catch(() => undefined);
  await stalling.stalledAt;
  t.same(await counts(), { b: 1 }, 'the slow replay applied its first batch');
  // As if no batch came for longer than a rebuild may take: another node takes it for stopped.
  await fixture.db.knex('projection_rebuilds').where({ projection: 'counts' }).update({ heartbeat_at: new Date(Date.now() - 3_600_000) });
  const taker = new BusProjectionRunner(new HandOverBus(), fixture.store, fixture.db, [thingCounts], { nodeName: 'taker', rebuildBatchSize: 1 });
  await taker.rebuild('counts');
  t.same(await counts(), { a: 1, b: 1 }, 'the taking over replay applied the whole log');

  stalling.release();
  await t.rejects(slowRebuild, { name: 'ProjectionRebuildTakenOverError', message: /the rebuild of projection counts was taken over/ }, 'the slow replay ends at its next batch');
  t.same(await counts(), { a: 1, b: 1 }, "its batch (thing-a again) was rolled back: thing-a counted once");
  t.same(await fixture.db.knex('projection_stream_positions').where({ projection: 'counts' }).orderBy('stream_id').pluck('stream_version'), [0, 0], 'the checkpoints are the other replay\'s');
  t.ok(messages.includes('projection rebuild taken over by another node; this replay ended'), 'the slow node says so');
  t.match(await slow.status(), [{ name: 'counts', state: 'stopped' }], 'and its projection is no longer shown as rebuilding there');
});

t.test('bus runner: a running node takes over a rebuild whose node stopped: at its start, at its next look, and one its own previous run left', async (t) => {
  const { fixture, counts } = await countsFixture(t, { appended: false });
  const marks = () => fixture.db.knex('projection_rebuilds').pluck('node');
  await fixture.store.append('thing-b', [thing('b')], 'no_stream');
  await fixture.store.append('thing-a', [thing('a')], 'no_stream');

  // A rebuild stopped by its node's shutdown between two batches: the mark is dated back at once.
  const stalling = stallingStore(fixture.store, 2);
  const stopped = new BusProjectionRunner(new HandOverBus(), stalling.store, fixture.db, [thingCounts], { nodeName: 'stopped', rebuildBatchSize: 1 });
  const stoppedRebuild = stopped.rebuild('counts');
  stoppedRebuild.catch(() => undefined);
  await stalling.stalledAt;
  const stopping = stopped.stop();
  stalling.release();
  await stopping;
  await t.rejects(stoppedRebuild, { name: 'ProjectionRebuildStoppedError' });
  const [mark] = await fixture.db.knex('projection_rebuilds').select('node', 'heartbeat_at');
  t.equal(mark.node, 'stopped', 'its mark stays: the tables hold part of the log');
  t.equal(new Date(mark.heartbeat_at).getTime(), 0, 'dated back, so that it is taken for stopped at once');

  // A node that starts takes it over at once.
  const { messages, log } = recordingLog();
  const bus = new HandOverBus();
  const worker = new BusProjectionRunner(bus, fixture.store, fixture.db, [thingCounts], { pollMs: 5, log, nodeName: 'worker', rebuildStaleMs: 1_000, takeoverCheckMs: 50 });
  t.teardown(() => worker.stop());
  await worker.start();
  await waitUntil(async () => (await marks()).length === 0, 10_000, 'the stopped rebuild to be taken over and run to its end');
  t.same(await counts(), { a: 1, b: 1 });
  t.ok(messages.includes('projection rebuild taken over: its node stopped before its end'), 'the node says it took it over');
  t.match(await worker.status(), [{ name: 'counts', state: 'running' }], 'and consumes again');

  // A node that dies mid-rebuild later: its mark goes stale while the running node looks every so often.
  await fixture.db.knex('projection_rebuilds').insert({ projection: 'counts', node: 'died', started_at: new Date(), heartbeat_at: new Date() });
  await fixture.db.knex('thing_counts').delete(); // what its emptying did
  const [fresh] = await worker.status();
  t.equal(fresh.state, 'rebuilding');
  t.equal(fresh.lastError, null, 'a rebuild that goes on is not said to have stopped');
  await waitUntil(async () => (await marks()).length === 0, 10_000, 'the stale rebuild to be taken over');
  t.same(await counts(), { a: 1, b: 1 }, 'taken over once its mark was stale, and replayed whole');
  t.equal(messages.filter((message) => message === 'projection rebuild taken over: its node stopped before its end').length, 2);

  // A restarted node (a container keeps its host name and pid) finds its previous run's mark, however fresh: it is stopped.
  await fixture.db.knex('projection_rebuilds').insert({ projection: 'counts', node: 'restarted', started_at: new Date(), heartbeat_at: new Date() });
  await fixture.db.knex('thing_counts').delete();
  const restarted = new BusProjectionRunner(new HandOverBus(), fixture.store, fixture.db, [thingCounts], { pollMs: 5, nodeName: 'restarted' });
  t.teardown(() => restarted.stop());
  await restarted.start();
  await waitUntil(async () => (await marks()).length === 0, 10_000, "its previous run's rebuild to be taken over");
  t.same(await counts(), { a: 1, b: 1 });
});

t.test('bus runner: a node takes over a stopped rebuild while its own consumer waits on that rebuild\'s mark: the wait gives up (unacknowledged) so that the consumer can stop', async (t) => {
  const { fixture, counts } = await countsFixture(t);
  // Another node's rebuild, going on as the worker starts; it stops sending batches.
  await migrateProjectionStreamPositions(fixture.db.knex);
  await fixture.db.knex('projection_rebuilds').insert({ projection: 'counts', node: 'died', started_at: new Date(), heartbeat_at: new Date() });
  const bus = new DrainingBus();
  const { messages, log } = recordingLog();
  const worker = new BusProjectionRunner(bus, fixture.store, fixture.db, [thingCounts], { pollMs: 5, log, nodeName: 'worker', rebuildStaleMs: 1_000, takeoverCheckMs: 50 });
  t.teardown(() => worker.stop());
  await worker.start();
  const delivered = bus.deliver(await fixture.store.readAll());
  delivered.catch(() => undefined);
  await waitUntil(() => messages.includes('projection is being rebuilt on another node; its batches wait'), 10_000, 'the batch to wait on the mark');
  await waitUntil(async () => (await fixture.db.knex('projection_rebuilds')).length === 0, 10_000, 'the stale rebuild to be taken over and run to its end');
  await t.rejects(delivered, { name: 'ProjectionRebuildingError' }, 'the waiting batch gave up, unacknowledged: the bus delivers it again');
  t.same(await counts(), { a: 1, b: 1 }, 'the taking over replay applied the log');
  t.match(await worker.status(), [{ name: 'counts', state: 'running' }], 'and the node consumes again');
});
