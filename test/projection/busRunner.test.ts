import t, { type Test } from 'tap';
import type { Knex } from 'knex';
import type { Bus, BusConsumerOptions } from '../../src/bus/port.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { BusProjectionRunner } from '../../src/projection/busRunner.js';
import type { Projection } from '../../src/projection/types.js';
import { externalProjection } from './externalProjection.js';
import { openMemoryPglite, openStore, thing, waitUntil } from '../eventstore/contract.js';

/**
 * A bus that behaves like Kafka at its worst within its guarantees: per-stream order kept,
 * streams interleaved arbitrarily, every batch delivered twice (at least once).
 */
class DuplicatingBus implements Bus {
  readonly consumers: BusConsumerOptions[] = [];
  async consume(options: BusConsumerOptions) {
    this.consumers.push(options);
    return { stop: async () => void this.consumers.splice(this.consumers.indexOf(options), 1) };
  }
  async deliver(events: RecordedEvent[]) {
    const byStream = new Map<string, RecordedEvent[]>();
    for (const event of events) byStream.set(event.streamId, [...(byStream.get(event.streamId) ?? []), event]);
    // Streams in reverse order of first appearance: cross-stream order is not promised.
    const batches = [...byStream.values()].reverse();
    for (const consumer of this.consumers) {
      for (const batch of batches) {
        const wanted = batch.filter((event) => consumer.types.includes(event.type));
        await consumer.handler(wanted);
        await consumer.handler(wanted); // redelivery after a lost commit
      }
    }
  }
  owed = 0; // deliver() hands every batch over before it returns
  readonly backlogAsked: (readonly string[])[] = [];
  failure: Error | null = null;
  /** While set, backlog answers once it resolves: a broker slow to answer, or unreachable and retried. */
  hold: Promise<void> | null = null;
  async backlog(groups: readonly string[]) {
    this.backlogAsked.push(groups);
    if (this.hold) await this.hold;
    if (this.failure) throw this.failure;
    return new Map(groups.map((group) => [group, this.owed]));
  }
  /** Groups another node consumes (this bus's own consumers count too). */
  readonly consumedElsewhere = new Set<string>();
  async consumingGroups(groups: readonly string[]) {
    return new Set(groups.filter((group) => this.consumedElsewhere.has(group) || this.consumers.some((consumer) => consumer.group === group)));
  }
  async close() {}
}

const countingProjection: Projection = {
  name: 'counts',
  eventTypes: ['ThingHappened'],
  tables: ['thing_counts'],
  async apply(trx: Knex.Transaction, event: RecordedEvent) {
    await trx.raw(
      `INSERT INTO thing_counts (name, count) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET count = thing_counts.count + 1`,
      [String(event.data.name)],
    );
  },
};

/** A store on an in-memory PGlite with the counting projection's table, closed at the test's end. */
async function countsStore(t: Test) {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(() => fixture.close());
  await fixture.db.knex.raw('CREATE TABLE thing_counts (name text PRIMARY KEY, count int NOT NULL)');
  return fixture;
}

t.test('bus runner: duplicates absorbed per stream, settle, status, rebuild', async (t) => {
  const fixture = await countsStore(t);
  const bus = new DuplicatingBus();
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  await runner.start();
  t.equal(bus.consumers[0].group, 'factlog.projection.counts');

  const a = await fixture.store.append('thing-a', [thing('a'), thing('a')], 'no_stream');
  const b = await fixture.store.append('thing-b', [thing('b')], 'no_stream');
  const write = { position: a.lastPosition, streamId: 'thing-a', streamVersion: a.nextExpectedVersion, types: ['ThingHappened'] };
  const settled = runner.settle(write, 2_000);
  await bus.deliver(await fixture.store.readAll());
  t.same(await settled, [], 'applied by every projection that handles it');
  const counts = async () => Object.fromEntries((await fixture.db.knex('thing_counts').orderBy('name')).map((row) => [row.name, row.count]));
  t.same(await counts(), { a: 2, b: 1 }, 'every event applied exactly once despite double delivery');

  await t.rejects(runner.settle({ ...write, streamVersion: 5 }, 50), { name: 'ProjectionWaitTimeoutError', unapplied: ['counts'] }, 'settle times out for a write not yet applied, naming who lacks it');
  t.same(await runner.settle({ ...write, types: ['SomethingElse'] }, 50), [], 'no projection handles it: nothing to wait for');
  t.equal(await runner.caughtUp(b.lastPosition, 50), true, 'no relay reader: the bus owes nothing, so caught up');

  const [status] = await runner.status();
  t.equal(status.position, b.lastPosition);
  t.equal(status.lag, 0);

  await runner.rebuild('counts');
  t.same(await counts(), { a: 2, b: 1 }, 'rebuild from the store gives the same rows');
  await bus.deliver(await fixture.store.readAll());
  t.same(await counts(), { a: 2, b: 1 }, 'redelivery after the rebuild changes nothing');
  await runner.stop();
  t.equal(bus.consumers.length, 0);
  let published = a.lastPosition;
  const apiNode = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5, publishedPosition: async () => published });
  t.equal(await apiNode.caughtUp(b.lastPosition, 60), false, 'the relay has not published the head yet');
  published = b.lastPosition;
  t.equal(await apiNode.caughtUp(b.lastPosition, 60), true, 'published, and every group acknowledged it');
  bus.owed = 1;
  t.equal(await apiNode.caughtUp(b.lastPosition, 60), false, 'a group has not acknowledged what it was sent');
  t.same(bus.backlogAsked.at(-1), ['factlog.projection.counts'], "the projections' groups are asked");
  t.equal(await apiNode.projectionReached('counts', b.lastPosition, 60), false, 'projectionReached: not while its group owes');
  bus.owed = 0;
  t.equal(await apiNode.projectionReached('counts', b.lastPosition, 60), true, 'projectionReached: published and acknowledged');
  t.equal(await apiNode.projectionReached('counts', b.lastPosition + 1, 60), false, 'projectionReached: not past what the relay published');
  bus.owed = 1;
  t.equal(await apiNode.projectionReached('counts', a.lastPosition, 60, 'thing-a'), true, "projectionReached of a stream's write: its checkpoint has it, whatever the group owes");
  t.equal(await apiNode.projectionReached('counts', b.lastPosition, 60, 'thing-a'), false, 'projectionReached of a stream\'s write: not past its checkpoint, while the group owes');
  await apiNode.settle(write, 200); // never started here: it reads the checkpoints the workers wrote
  await t.rejects(apiNode.settle({ ...write, streamVersion: 9 }, 50), { name: 'ProjectionWaitTimeoutError' }, 'an API node still waits for workers');
});

t.test("bus runner: the writes a node waits for are looked up together, one read of the checkpoints a tick for all of them", async (t) => {
  const fixture = await countsStore(t);
  const bus = new DuplicatingBus();
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  await runner.start();
  t.teardown(() => runner.stop());
  const writes = [];
  for (let i = 0; i < 20; i++) {
    const appended = await fixture.store.append(`thing-${i}`, [thing(`t${i}`)], 'no_stream');
    writes.push({ position: appended.lastPosition, streamId: `thing-${i}`, streamVersion: appended.nextExpectedVersion, types: ['ThingHappened'] });
  }
  const reads: unknown[][] = [];
  const onQuery = (query: { sql: string; bindings?: unknown[] }) => {
    // The waiters' look-ups (the consumer's own reads and writes of its checkpoints are others).
    if (query.sql.includes('where ("projection", "stream_id") in')) reads.push(query.bindings ?? []);
  };
  fixture.db.knex.on('query', onQuery);
  t.teardown(() => void fixture.db.knex.off('query', onQuery));
  // Twenty requests wait for their writes; nothing is delivered until the node has looked three times.
  const settled = Promise.all(writes.map((write) => runner.settle(write, 10_000)));
  await waitUntil(() => reads.length >= 3, 10_000, 'three looks at the checkpoints');
  t.equal(reads[0].length, 40, "the first look asked for every waiting write's stream at once");
  t.ok(reads.slice(0, 3).every((bindings) => bindings.length === 40), 'and so did the next ones: one read a tick, not one a waiter');
  await bus.deliver(await fixture.store.readAll());
  t.same(await settled, writes.map(() => []), 'each settled once applied');
  t.ok(reads.length < 20, `${reads.length} reads for twenty waiters`);
});

t.test('bus runner: status before any node consumed reads a database with no stream positions, and makes none', async (t) => {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(() => fixture.close());
  await fixture.store.append('thing-1', [thing('a')], 'no_stream');
  const bus = new DuplicatingBus();
  bus.owed = 1; // as Kafka answers for a group that never consumed: all that was published
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  t.match(await runner.status(), [{ name: 'counts', position: 0, head: 1, lag: 1, state: 'stopped' }]);
  const table = await fixture.db.knex.raw(`SELECT to_regclass('projection_stream_positions') AS oid`);
  t.equal(table.rows[0].oid, null, 'no table was made');
});

t.test('bus runner: an API node started before any worker waits for the projections, and settles once a worker applied the write', async (t) => {
  const fixture = await countsStore(t);
  const a = await fixture.store.append('thing-a', [thing('a')], 'no_stream');
  const write = { position: a.lastPosition, streamId: 'thing-a', streamVersion: a.nextExpectedVersion, types: ['ThingHappened'] };
  // An API node never starts its runner: no worker has made the table of checkpoints yet.
  const apiNode = new BusProjectionRunner(new DuplicatingBus(), fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  await t.rejects(apiNode.settle(write, 50), { name: 'ProjectionWaitTimeoutError' }, 'a wait for the workers, not a missing relation');
  const settled = apiNode.settle(write, 5_000);
  const bus = new DuplicatingBus();
  const worker = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  await worker.start();
  await bus.deliver(await fixture.store.readAll());
  await settled;
  await worker.stop();
});

t.test('bus runner: a batch takes a transaction id only when its projection writes', async (t) => {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(() => fixture.close());
  const external = externalProjection();
  const { seen } = external;
  const bus = new DuplicatingBus();
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [external], { pollMs: 5 });
  await runner.start();
  const first = await fixture.store.append('thing-a', [thing('a')], 'no_stream');
  await fixture.store.append('thing-b', [thing('b')], 'no_stream');
  await bus.deliver(await fixture.store.readAll());
  // Streams with a checkpoint already: the batch reads (and before, row-locked) their positions.
  await fixture.store.append('thing-a', [thing('a2')], 'any');
  await bus.deliver(await fixture.store.readAll({ after: first.lastPosition + 1 }));
  t.same(seen, [null, null, null], 'each event applied once (duplicates skipped), with no id while it applies');
  const positions = await fixture.db.knex('projection_stream_positions').where({ projection: 'external' }).orderBy('stream_id').select('stream_id', 'stream_version');
  t.same(positions.map((row: { stream_id: string; stream_version: number }) => [row.stream_id, Number(row.stream_version)]), [['thing-a', 1], ['thing-b', 0]], 'checkpoints recorded');
  await runner.stop();
});

t.test('bus runner: lag is what the projection still owes (unpublished events and its group\'s unacknowledged messages), not the head past the last event of its types', async (t) => {
  const fixture = await countsStore(t);
  const bus = new DuplicatingBus();
  let published = 0;
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5, publishedPosition: async () => published });
  await runner.start();
  t.teardown(() => runner.stop());
  const thingAt = (await fixture.store.append('thing-a', [thing('a')], 'no_stream')).lastPosition;
  await bus.deliver(await fixture.store.readAll());
  // Events of a type the projection does not read: it will never apply them.
  const head = (await fixture.store.append('other-1', [{ type: 'OtherHappened', data: { value: 1 }, metadata: { repositoryId: 'repo-1', actor: 'user-1', causationId: null, correlationId: null } }, { type: 'OtherHappened', data: { value: 2 }, metadata: { repositoryId: 'repo-1', actor: 'user-1', causationId: null, correlationId: null } }], 'no_stream')).lastPosition;
  published = head;
  t.match(await runner.status(), [{ name: 'counts', position: thingAt, head, lag: 0, lastError: null }], 'nothing owed, though its last event is behind the head');
  published = head - 2;
  bus.owed = 3;
  t.match(await runner.status(), [{ lag: 5 }], 'two events not published yet, three messages not acknowledged');
  // An API node consumes nothing itself: its projections run where their groups have members.
  const apiBus = new DuplicatingBus();
  const apiNode = new BusProjectionRunner(apiBus, fixture.store, fixture.db, [countingProjection], { pollMs: 5 });
  t.match(await apiNode.status(), [{ name: 'counts', state: 'stopped' }], 'no member anywhere');
  apiBus.consumedElsewhere.add('factlog.projection.counts');
  t.match(await apiNode.status(), [{ name: 'counts', state: 'running' }], 'a worker consumes it');
  bus.failure = new Error('broker down');
  t.match(await runner.status(), [{ lag: head - thingAt, lastError: /the bus could not say what the consumers owe \(broker down\)/ }], 'counted from the checkpoints, and said so');
});

t.test('bus runner: a status waits for the bus only so long, then counts lag from the checkpoints; one question to the bus at a time', async (t) => {
  const fixture = await countsStore(t);
  const bus = new DuplicatingBus();
  const runner = new BusProjectionRunner(bus, fixture.store, fixture.db, [countingProjection], { pollMs: 5, busAnswerWaitMs: 30 });
  await runner.start();
  t.teardown(() => runner.stop());
  const appliedAt = (await fixture.store.append('thing-a', [thing('a')], 'no_stream')).lastPosition;
  await bus.deliver(await fixture.store.readAll());
  const head = (await fixture.store.append('thing-b', [thing('b')], 'no_stream')).lastPosition;
  let release = (): void => undefined;
  bus.hold = new Promise((resolve) => (release = resolve));
  const askedBefore = bus.backlogAsked.length;
  const together = await Promise.all([runner.status(), runner.status()]);
  for (const status of together) {
    t.match(status, [{ name: 'counts', lag: head - appliedAt, lastError: 'lag counted from the checkpoints: the bus has not said what the consumers owe within 30 ms' }], 'answered without the bus, and said so');
  }
  t.match(await runner.status(), [{ lastError: /has not said/ }], 'a status while that question is still unanswered waits for it again');
  t.equal(bus.backlogAsked.length - askedBefore, 1, 'the three statuses asked the bus one question');
  bus.hold = null;
  bus.owed = 4;
  release();
  // The held question answers the status that joins it; the next status asks again.
  await waitUntil(async () => (await runner.status())[0].lastError === null, 5_000, 'the bus answering');
  t.match(await runner.status(), [{ lag: 4, lastError: null }], "the bus's count once it answers");
  t.ok(bus.backlogAsked.length - askedBefore >= 2, 'asked again once the first question was answered');
  // A question that fails after every status waiting for it gave up: nobody hears it, nothing is left unhandled.
  bus.hold = new Promise((resolve) => (release = resolve));
  bus.failure = new Error('broker down');
  t.match(await runner.status(), [{ lastError: /has not said/ }], 'the held question, then');
  bus.hold = null;
  release();
  await waitUntil(async () => /could not say what the consumers owe \(broker down\)/.test((await runner.status())[0].lastError ?? ''), 5_000, 'the next question failing');
});
