import t, { type Test } from 'tap';
import { openDatabase, openScratchPostgres } from '../../src/db/database.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import type { Projection } from '../../src/projection/types.js';
import { openStore, thing, waitUntil, type StoreFixture } from '../eventstore/contract.js';
import { checkpoint, countingProjection, createRowsTable, rows } from './countingProjection.js';

// A server's catch-up batches: a full batch goes in several transactions side by side on the
// pool (ProjectionRunner's catchUpTransactions), a live one in one transaction.

async function openServerStore(t: Test, names: readonly string[]): Promise<StoreFixture> {
  const fixture = await openStore(() => openScratchPostgres(undefined, 'factlog_projection_side'));
  t.teardown(() => fixture.close());
  for (const name of names) await createRowsTable(fixture.db, name);
  return fixture;
}

/** The runners' batch size here: a batch of this many events is a catch-up batch. */
const FULL_BATCH = 6;

/** What each projection saw while applying a batch: its transaction and, for the intake, the others' rows. */
interface BatchSeen {
  projection: string;
  first: number;
  transaction: string;
  othersRows?: number;
}

interface Observed {
  seen: BatchSeen[];
  /** The first positions of the batches each projection has begun. */
  started: Map<string, Set<number>>;
}

/**
 * A counting projection that notes each batch it begins. `meet`: a full batch of these projections
 * waits until all of them have begun one holding the same first event: in one transaction, one
 * after the other, they never would, and the batch fails after a while.
 */
function observedProjection(
  name: string,
  observed: Observed,
  options: { startsWork?: boolean; meet?: readonly string[]; failOn?: () => string | null } = {},
): Projection {
  const base = countingProjection(name, { failOn: options.failOn });
  return {
    ...base,
    ...(options.startsWork ? { startsWork: true } : {}),
    async applyBatch(trx, events) {
      const first = events[0]?.globalPosition ?? 0;
      const { rows: [current] } = await trx.raw<{ rows: Array<{ id: string }> }>('SELECT txid_current()::text AS id');
      const entry: BatchSeen = { projection: name, first, transaction: current.id };
      if (options.startsWork) {
        const others = await trx.raw<{ rows: Array<{ n: string }> }>(`SELECT coalesce(sum(count), 0)::text AS n FROM other_rows`);
        entry.othersRows = Number(others.rows[0].n);
      }
      observed.seen.push(entry);
      const began = observed.started.get(name) ?? new Set<number>();
      began.add(first);
      observed.started.set(name, began);
      if (options.meet && events.length === FULL_BATCH) {
        // Long enough for a loaded machine to begin the three transactions; one after the other they never meet.
        const deadline = Date.now() + 20_000;
        while (!options.meet.every((other) => observed.started.get(other)?.has(first))) {
          if (Date.now() > deadline) throw new Error(`${name}: the others never began the batch at ${first} beside it`);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      }
      for (const event of events) await base.apply(trx, event);
    },
  };
}

/**
 * Waits until the log up to `last` is visible to readers: an append is, on a server, only once
 * every older transaction of the cluster has ended, other test files' included, and a runner
 * started before would read its first batches short (not full, so not side by side).
 */
async function untilVisible(fixture: StoreFixture, last: number): Promise<void> {
  await waitUntil(async () => (await fixture.store.headPosition()) >= last, 60_000, `the log visible up to ${last}`);
}

async function counts(fixture: StoreFixture, name: string): Promise<Array<[string, number]>> {
  return (await rows(fixture.db, name)).map((row) => [row.name, row.count]);
}

t.test('postgres: a full batch goes in transactions side by side, the intake after them; a live batch in one', async (t) => {
  const fixture = await openServerStore(t, ['one', 'two', 'other', 'intake']);
  const observed: Observed = { seen: [], started: new Map() };
  const together = ['one', 'two', 'other'];
  const projections = [
    observedProjection('one', observed, { meet: together }),
    observedProjection('two', observed, { meet: together }),
    observedProjection('other', observed, { meet: together }),
    observedProjection('intake', observed, { startsWork: true }),
  ];
  let last = 0;
  for (let index = 0; index < 12; index += 1) last = (await fixture.store.append(`s-${index}`, [thing(`n${index % 3}`)], 'no_stream')).lastPosition;
  await untilVisible(fixture, last);
  const runner = new ProjectionRunner(fixture.store, fixture.db, projections, { batchSize: FULL_BATCH, catchUpTransactions: 3, retryBaseMs: 10 });
  t.teardown(() => runner.stop());
  await runner.start();
  await runner.waitFor(last, 20_000);

  for (const name of ['one', 'two', 'other', 'intake']) {
    t.same(await counts(fixture, name), [['n0', 4], ['n1', 4], ['n2', 4]], `${name}: each event applied once`);
    t.equal(await checkpoint(fixture.db, name), last, `${name}: checkpoint at the head`);
  }
  for (const first of [...new Set(observed.seen.map((entry) => entry.first))]) {
    const batch = observed.seen.filter((entry) => entry.first === first);
    const transactionOf = (name: string) => batch.find((entry) => entry.projection === name)?.transaction;
    t.equal(new Set(together.map(transactionOf)).size, 3, `batch from ${first}: the three read models in three transactions at once`);
    t.notOk(together.map(transactionOf).includes(transactionOf('intake')), `batch from ${first}: the intake in a transaction of its own`);
    const intake = batch.find((entry) => entry.projection === 'intake');
    t.equal(intake?.othersRows, first + 5, `batch from ${first}: the intake saw the others' batch committed`);
  }

  // A live batch (fewer events than a batch holds): one transaction, as before.
  observed.seen.length = 0;
  const live = await fixture.store.append('s-live', [thing('live')], 'no_stream');
  await runner.waitFor(live.lastPosition, 20_000);
  t.equal(new Set(observed.seen.map((entry) => entry.transaction)).size, 1, 'a live batch: every projection in one transaction');
  t.same(observed.seen.map((entry) => entry.projection), ['one', 'two', 'other', 'intake'], 'the intake last');
});

t.test('postgres: a projection failing in a side-by-side batch stops alone; the others commit, each event once', async (t) => {
  const fixture = await openServerStore(t, ['steady', 'fragile', 'other']);
  const observed: Observed = { seen: [], started: new Map() };
  let poison: string | null = 'n2';
  const projections = [
    observedProjection('steady', observed),
    observedProjection('fragile', observed, { failOn: () => poison }),
    observedProjection('other', observed),
  ];
  let last = 0;
  for (let index = 0; index < 12; index += 1) last = (await fixture.store.append(`s-${index}`, [thing(`n${index % 4}`)], 'no_stream')).lastPosition;
  await untilVisible(fixture, last);
  const runner = new ProjectionRunner(fixture.store, fixture.db, projections, { batchSize: FULL_BATCH, catchUpTransactions: 3, retryBaseMs: 20, retryMaxMs: 50 });
  t.teardown(() => runner.stop());
  await runner.start();
  await waitUntil(async () => (await runner.status()).some((status) => status.name === 'fragile' && status.state === 'failed'), 20_000, 'the fragile projection to fail');
  await waitUntil(async () => (await checkpoint(fixture.db, 'steady')) === last && (await checkpoint(fixture.db, 'other')) === last, 20_000, 'the others to reach the head');
  for (const name of ['steady', 'other']) t.same(await counts(fixture, name), [['n0', 3], ['n1', 3], ['n2', 3], ['n3', 3]], `${name}: every event once`);
  t.equal(await checkpoint(fixture.db, 'fragile'), 0, 'the failing one kept nothing of the batch with its poison event');
  t.same(await counts(fixture, 'fragile'), []);

  poison = null;
  await waitUntil(async () => (await checkpoint(fixture.db, 'fragile')) === last, 20_000, 'the fragile projection to recover');
  t.same(await counts(fixture, 'fragile'), [['n0', 3], ['n1', 3], ['n2', 3], ['n3', 3]], 'recovered: every event once');
});

t.test("postgres: a retry's resume that fails after stop() arms no retry: the node's database closing under it does not keep the process alive", async (t) => {
  const fixture = await openServerStore(t, ['fragile']);
  // The runner's own pool of one connection, which the test can hold: a node's, closed with it.
  const url = (fixture.db.knex.client.config.connection as { connectionString: string }).connectionString;
  const nodeDb = await openDatabase({ kind: 'postgres', url, maxConns: 1 });
  t.teardown(() => nodeDb.close());
  // knex's pool (tarn), and a connection taken out of it (namedLock.ts takes them the same way).
  const pool = nodeDb.knex.client.pool as { numPendingAcquires(): number };
  let held: Promise<unknown> | null = null;
  const projection = countingProjection('fragile', {
    // Inside the failing batch's transaction, which has the pool's connection: the test takes it next.
    failOn: () => {
      held ??= nodeDb.knex.client.acquireConnection() as Promise<unknown>;
      return 'boom';
    },
  });
  const warnings: string[] = [];
  const runner = new ProjectionRunner(fixture.store, nodeDb, [projection], {
    retryBaseMs: 1,
    retryMaxMs: 50,
    log: { info: () => undefined, warn: (_details, message) => warnings.push(message) },
  });
  t.teardown(() => runner.stop());
  await fixture.store.append('s-1', [thing('boom')], 'no_stream');
  await runner.start();
  await waitUntil(() => held !== null, 60_000, 'the batch with the poison event');
  const connection = await held;
  // The batch failed; its retry's resume reads the checkpoint, and waits for the connection the test holds.
  await waitUntil(() => pool.numPendingAcquires() === 1, 20_000, "the retry's read of its checkpoint");
  await runner.stop();
  const warnedWhileRunning = warnings.length;
  // The node closes its database: the pool is destroyed, and the read waiting for a connection fails.
  const closing = nodeDb.close();
  await nodeDb.knex.client.releaseConnection(connection);
  await closing;
  await new Promise((resolve) => setImmediate(resolve));
  t.same(warnings.slice(warnedWhileRunning), [], 'the stopped runner neither reported the failure nor armed a retry (which would fail and re-arm for ever)');
});
