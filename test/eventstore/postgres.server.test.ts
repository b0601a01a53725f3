import t from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore, Subscription } from '../../src/eventstore/port.js';
import { eventStoreContract, inFlightAppendContract, openStore, thing, waitUntil } from './contract.js';

const openDb = () => openScratchPostgres(undefined, 'factlog_eventstore');

// Other suites share the server: reads wait for this store's appends (see awaitingOwnAppends).
eventStoreContract(t, openDb);
inFlightAppendContract(t, openDb);

/** The log reads of a subscription (readGlobal, rows shape): their first binding is the position they read after. */
const LOG_READ = /FROM events WHERE .*global_position > (\?|\$1) ORDER BY global_position LIMIT/s;

/** Waits until readers see the log up to `last` (other databases' transactions can hide it a while). */
async function untilVisible(store: EventStore, last: number): Promise<void> {
  await waitUntil(async () => (await store.headPosition()) >= last, 60_000, `the log visible up to ${last}`);
}

/** A subscription from the log's start in batches of two, whose handler holds the first batch until `release()`. */
function holdingFirstBatch(store: EventStore, onBatch: (batch: RecordedEvent[]) => void): { subscription: Subscription; release(): void } {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let batches = 0;
  const subscription = store.subscribe({
    after: 0,
    batchSize: 2,
    handler: async (batch) => {
      onBatch(batch);
      if ((batches += 1) === 1) await held;
    },
  });
  return { subscription, release };
}

t.test('catching up on a server, a subscription reads its next batch while its handler applies a full one', async (t) => {
  const { db, store, close } = await openStore(openDb);
  t.teardown(close);
  const positions: number[] = [];
  for (let i = 1; i <= 5; i++) positions.push(...(await store.append(`thing-${i}`, [thing(`t${i}`)], 'no_stream')).events.map((event) => event.globalPosition));
  // The batches asserted are those of a log read whole: a subscription begun while another
  // database's transaction still hides some appends would read a short batch first.
  await untilVisible(store, positions[4]);
  const readsAfter: number[] = [];
  const onQuery = (query: { sql: string; bindings?: readonly unknown[] }) => {
    if (LOG_READ.test(query.sql)) readsAfter.push(Number(query.bindings?.[0]));
  };
  db.knex.on('query', onQuery);
  t.teardown(() => void db.knex.off('query', onQuery));

  const delivered: number[][] = [];
  const { subscription, release: releaseFirst } = holdingFirstBatch(store, (batch) => delivered.push(batch.map((event) => event.globalPosition)));
  t.teardown(() => {
    releaseFirst();
    return subscription.stop();
  });

  await waitUntil(() => delivered.length === 1, 10_000, 'the first batch');
  await waitUntil(() => readsAfter.includes(positions[1]), 10_000, () => `a read after ${positions[1]} while the first handler waits (reads after: ${readsAfter.join(', ')})`);
  t.equal(delivered.length, 1, 'the next batch was read, not delivered, while the first handler held its batch');
  releaseFirst();
  await subscription.caughtUp();
  t.same(delivered, [positions.slice(0, 2), positions.slice(2, 4), positions.slice(4)], 'every event once, in order, in the same batches');
  t.equal(readsAfter.filter((after) => after === positions[1]).length, 1, 'the batch read ahead is the one delivered, not read again');
});

t.test('a subscription stopped while its handler holds a full batch does not deliver the batch it read ahead', async (t) => {
  const { store, close } = await openStore(openDb);
  t.teardown(close);
  let last = 0;
  for (let i = 1; i <= 4; i++) last = (await store.append(`thing-${i}`, [thing(`t${i}`)], 'no_stream')).lastPosition;
  // A first batch read short (appends still hidden) would not be full, and nothing would be read ahead.
  await untilVisible(store, last);
  const delivered: RecordedEvent[][] = [];
  const { subscription, release: releaseFirst } = holdingFirstBatch(store, (batch) => delivered.push(batch));
  await waitUntil(() => delivered.length === 1, 10_000, 'the first batch');
  const stopped = subscription.stop();
  releaseFirst();
  await stopped;
  t.equal(delivered.length, 1, 'only the batch being handled when it stopped');
});

t.test('the committed head runs ahead of the readable head while an older transaction is open, and meets it when that ends', async (t) => {
  // Not awaiting its own appends (the shared-server wrapper would wait for them to be readable).
  const fixture = await openStore(openDb, { sharedServer: false });
  t.teardown(() => fixture.close());
  const before = (await fixture.store.append('thing-1', [thing('a')], 'no_stream')).lastPosition;
  await untilVisible(fixture.store, before);
  const holder = await fixture.db.knex.transaction();
  try {
    await holder.raw('SELECT txid_current()'); // an id older than the next append's
    const appended = (await fixture.store.append('thing-1', [thing('b')], 0)).lastPosition;
    t.equal(await fixture.store.committedHeadPosition?.(), appended, 'the append is committed');
    t.ok((await fixture.store.headPosition()) < appended, 'but not readable while the older transaction runs');
    await holder.rollback();
    await untilVisible(fixture.store, appended);
    t.equal(await fixture.store.committedHeadPosition?.(), await fixture.store.headPosition());
  } finally {
    if (!holder.isCompleted()) await holder.rollback();
  }
});
