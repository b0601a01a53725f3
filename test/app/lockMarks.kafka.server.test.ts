import t, { type Test } from 'tap';
import type { Knex } from 'knex';
import { createLockMarks } from '../../src/app/lockMarks.js';
import { createKafkaBus, createKafkaRelay, readRelayPosition, relayPositionName } from '../../src/bus/kafka.js';
import { openScratchPostgres } from '../../src/db/database.js';
import { withNamedLock } from '../../src/db/namedLock.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { BusProjectionRunner } from '../../src/projection/busRunner.js';
import type { AppendedWrite, Projection } from '../../src/projection/types.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { deleteTestTopics, ensureBroker, quickConsumer, testKafkaOptions } from '../bus/helpers.js';
import { openStore, thing, waitUntil } from '../eventstore/contract.js';

/**
 * The marks of src/app/lockMarks.ts on the Kafka tier, with a real broker: a relay publishes the
 * log, a bus runner's consumer group applies it, and the next holder of a marked lock asks the
 * bus runner whether the marked write is applied (`projectionReached`). The pipeline keeps
 * appending events for other sources, so a projection's group seldom has nothing left to
 * acknowledge: the next holder waits for the marked write, never for the group to drain
 * (docs/architecture.md, "Locks and lagging read models").
 */

const LOCK = 'factlog.test-kafka-marks';
/** What the next holder of a marked lock waits for its marks at most (settleWaitMs on a service). */
const WAIT_MS = 2_000;
/** What one event of the load costs the projection: it applies them slower than they are appended, so its group always owes some. */
const LOAD_EVENT_MS = 25;

/**
 * Counts ThingHappened events by name in thing_counts; an event of the load (a name starting
 * with `load`) takes LOAD_EVENT_MS and writes no row (a row would give its transaction an id, which
 * holds back the event store's readers, the relay's among them, on this one server), and the one
 * named `held` waits until `release()`.
 */
function countingProjection() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const projection: Projection = {
    name: 'counts',
    eventTypes: ['ThingHappened'],
    tables: ['thing_counts'],
    async apply(trx: Knex.Transaction, event: RecordedEvent) {
      const name = String(event.data.name);
      if (name.startsWith('load')) {
        await new Promise((resolve) => setTimeout(resolve, LOAD_EVENT_MS));
        return;
      }
      if (name === 'held') await released;
      await trx.raw(`INSERT INTO thing_counts (name, count) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET count = thing_counts.count + 1`, [name]);
    },
  };
  return { projection, release };
}

async function kafkaTier(t: Test) {
  const brokers = await ensureBroker();
  const fixture = await openStore(() => openScratchPostgres(undefined, 'factlog_lock_marks_kafka'), { pollIntervalMs: 10 });
  const { db, store, schemas } = fixture;
  await migrateReadModels(db.knex);
  await db.knex.raw('CREATE TABLE thing_counts (name text PRIMARY KEY, count int NOT NULL)');
  const kafka = testKafkaOptions(brokers);
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka });
  const bus = createKafkaBus({ kafka, registry: schemas, categories: ['thing'], consumer: { ...quickConsumer, maxWaitTimeMs: 100 } });
  const counting = countingProjection();
  const groupPrefix = kafka.topicPrefix;
  const runner = new BusProjectionRunner(bus, store, db, [counting.projection], {
    groupPrefix,
    pollMs: 20,
    publishedPosition: () => readRelayPosition(db.knex, relayPositionName(kafka)),
  });
  const marks = createLockMarks({ db, projections: runner, waitMs: WAIT_MS });
  let loading = false;
  let loaded: Promise<void> = Promise.resolve();
  t.teardown(async () => {
    loading = false;
    await loaded;
    counting.release();
    await runner.stop();
    await bus.close();
    await relay.stop();
    await fixture.close();
    await deleteTestTopics(brokers, kafka.topicPrefix);
  });
  await relay.start();
  await runner.start();

  const group = `${groupPrefix}.projection.counts`;
  const backlog = async () => (await bus.backlog([group])).get(group) ?? 0;
  const append = async (streamId: string, name: string): Promise<AppendedWrite> => {
    const { events } = await store.append(streamId, [thing(name)], 'any');
    const last = events[events.length - 1];
    return { position: last.globalPosition, streamId, streamVersion: last.streamVersion, types: [last.type] };
  };
  /** Other sources' events, appended one after another until the test ends: faster than the projection applies them. */
  const startLoad = () => {
    loading = true;
    loaded = (async () => {
      for (let index = 0; loading; index += 1) {
        await append(`thing-load-${index % 8}`, `load${index}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
  };
  /** Holds the lock as a command whose write `unapplied` had not applied when it answered: it marks the lock. */
  const leaveMark = (write: AppendedWrite) => withNamedLock(db, LOCK, () => marks.leave(write, ['counts']), 'exclusive', ['counts']);
  /** The next holder of the lock; it runs only once its marks are reached. */
  const nextHolder = () => withNamedLock(db, LOCK, async () => 'ran', 'exclusive', ['counts']);
  const markRows = () => db.knex('lock_pending_positions').where({ lock_name: LOCK }).select('projection', 'position');
  const applied = async (write: AppendedWrite) =>
    (await db.knex('projection_stream_positions').where({ projection: 'counts', stream_id: write.streamId }).where('stream_version', '>=', write.streamVersion).first()) !== undefined;
  return { db, append, startLoad, leaveMark, nextHolder, markRows, applied, backlog, release: counting.release };
}

t.test('bus tier: the next holder of a marked lock goes on once the projection applied the marked write, though its group never drains', async (t) => {
  const { append, startLoad, leaveMark, nextHolder, markRows, applied, backlog } = await kafkaTier(t);
  const write = await append('thing-marked', 'marked');
  await leaveMark(write);
  t.same(await markRows(), [{ projection: 'counts', position: String(write.position) }], 'the write marks the lock');

  startLoad();
  await waitUntil(() => applied(write), 60_000, 'the projection to apply the marked write');
  await waitUntil(async () => (await backlog()) > 0, 30_000, "the projection's group to owe the load's events");

  const started = Date.now();
  let ran: string | undefined;
  await t.resolves(
    nextHolder().then((result) => void (ran = result)),
    'the next holder is not refused',
  );
  t.equal(ran, 'ran', 'it runs');
  t.ok(Date.now() - started < WAIT_MS, `without waiting its marks' wait out (${Date.now() - started} ms)`);
  t.ok((await backlog()) > 0, 'while the group still owes events appended after the marked write');
  t.same(await markRows(), [], 'and removes the mark it waited for');
});

t.test('bus tier: a marked write the projection has not applied holds the next holder back, under load as without', async (t) => {
  const { append, startLoad, leaveMark, nextHolder, markRows, applied, release } = await kafkaTier(t);
  startLoad();
  const write = await append('thing-held', 'held');
  await leaveMark(write);
  await t.rejects(nextHolder(), { name: 'ReadModelsBehindError' }, 'refused while the projection has not applied it');
  t.equal((await markRows()).length, 1, 'the mark stays');
  release();
  await waitUntil(() => applied(write), 60_000, 'the projection to apply the marked write');
  t.equal(await nextHolder(), 'ran', 'once applied, the next holder runs');
  t.same(await markRows(), [], 'and removes the mark');
});
