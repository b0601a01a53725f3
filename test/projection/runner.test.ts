import { EventEmitter } from 'node:events';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { openScratchPostgres, type Database } from '../../src/db/database.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { ProjectionRebuildStoppedError, ProjectionRunner, ProjectionWaitTimeoutError, rebuildUntilInterrupted, rebuildWithProgressBar } from '../../src/projection/runner.js';
import type { Projection } from '../../src/projection/types.js';
import { checkpoint, countingProjection, createRowsTable, rows } from './countingProjection.js';
import { externalProjection } from './externalProjection.js';
import { withServers } from '../helpers/servers.js';
import { openMemoryPglite, openStore, thing, waitUntil, type StoreFixture } from '../eventstore/contract.js';

const backends: Array<{ name: string; open: () => Promise<Database> }> = [
  { name: 'pglite', open: openMemoryPglite },
  ...(withServers ? [{ name: 'postgres', open: () => openScratchPostgres(undefined, 'factlog_projection') }] : []),
];

/**
 * How long a test waits for the runner to apply an append: on the PostgreSQL server an append is
 * read only once every older transaction on the server has ended, other test files' included
 * (the contract's stores wait as long for their own appends: awaitingOwnAppends).
 */
const APPLIED_WITHIN_MS = 60_000;

/** The store, counting the subscriptions it has running and the events it delivers. */
function countingSubscriptions(store: EventStore): { store: EventStore; running: () => number; delivered: () => number; opened: () => number } {
  let running = 0;
  let opened = 0;
  let delivered = 0;
  const counted: EventStore = {
    ...store,
    subscribe(options) {
      running += 1;
      opened += 1;
      const subscription = store.subscribe({
        ...options,
        handler: (batch) => {
          delivered += batch.length;
          return options.handler(batch);
        },
      });
      let stopped = false;
      return {
        caughtUp: () => subscription.caughtUp(),
        async stop() {
          await subscription.stop();
          if (!stopped) running -= 1;
          stopped = true;
        },
      };
    },
  };
  return { store: counted, running: () => running, delivered: () => delivered, opened: () => opened };
}

function runnerSuite(t: Test, open: () => Promise<Database>): void {
  const withFixture = (name: string, body: (t: Test, fixture: StoreFixture) => Promise<void>) =>
    t.test(name, async (t) => {
      const fixture = await openStore(open);
      t.teardown(() => fixture.close());
      await body(t, fixture);
    });

  withFixture('applies events, advances past other types, reports status', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')], { batchSize: 3 });
    t.teardown(() => runner.stop());
    await store.append('s-1', [thing('a'), thing('b'), thing('a')], 'no_stream');
    const otherTypes = await store.append('o-1', [{ type: 'OtherHappened', data: { value: 1 }, metadata: thing('x').metadata }], 'no_stream');

    const before = await runner.status();
    t.match(before, [{ name: 'things', position: 0, head: otherTypes.lastPosition, lag: otherTypes.lastPosition, state: 'stopped', lastError: null }]);
    // `projections list` on a read-only role or a replica: the status of a runner that never ran only reads.
    const table = await db.knex.raw(`SELECT to_regclass('projection_checkpoints') AS oid`);
    t.equal(table.rows[0].oid, null, 'status made no checkpoint table (start does)');

    await runner.start();
    await runner.waitFor(otherTypes.lastPosition, APPLIED_WITHIN_MS);
    t.same((await rows(db, 'things')).map((row) => [row.name, row.count]), [['a', 2], ['b', 1]]);
    t.equal(await checkpoint(db, 'things'), otherTypes.lastPosition, 'the checkpoint moved past events of other types');
    t.match(await runner.status(), [{ position: otherTypes.lastPosition, lag: 0, state: 'running', lastError: null }]);

    const live = await store.append('s-1', [thing('c')], 2);
    await runner.waitFor(live.lastPosition, APPLIED_WITHIN_MS);
    t.same((await rows(db, 'things')).map((row) => row.name), ['a', 'b', 'c'], 'live events are applied');
    await runner.start(); // starting twice is harmless
    await runner.stop();
    t.match(await runner.status(), [{ state: 'stopped', position: live.lastPosition }]);
  });

  withFixture('a batch that fails mid-way leaves neither rows nor checkpoint, then recovers', async (t, { db, store }) => {
    await createRowsTable(db, 'fragile');
    await createRowsTable(db, 'healthy');
    let poison: string | null = 'boom';
    const runner = new ProjectionRunner(
      store,
      db,
      [countingProjection('fragile', { failOn: () => poison }), countingProjection('healthy')],
      { retryBaseMs: 20, retryMaxMs: 50 },
    );
    t.teardown(() => runner.stop());
    const appended = await store.append('s-1', [thing('a'), thing('b'), thing('boom'), thing('c')], 'no_stream');
    await runner.start();
    let statuses = await runner.status();
    const deadline = Date.now() + 10_000;
    while (statuses.find((status) => status.name === 'fragile')?.state !== 'failed' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      statuses = await runner.status();
    }
    const fragile = statuses.find((status) => status.name === 'fragile');
    t.match(fragile, { state: 'failed', position: 0, lag: appended.lastPosition, lastError: /cannot project boom/ });
    t.same(await rows(db, 'fragile'), [], 'the events before the failure in the batch were rolled back');
    t.equal(await checkpoint(db, 'fragile'), 0, 'the checkpoint did not move');

    await runner.waitFor(appended.lastPosition, APPLIED_WITHIN_MS); // only running projections are waited for
    t.equal((await rows(db, 'healthy')).length, 4, 'other projections are unaffected');

    await new Promise((resolve) => setTimeout(resolve, 150)); // a few retries, all failing
    t.same(await rows(db, 'fragile'), [], 'retries fail atomically too');
    poison = null; // the bug is fixed
    const recoveredBy = Date.now() + 10_000;
    while (Date.now() < recoveredBy && (await checkpoint(db, 'fragile')) !== appended.lastPosition) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    t.same((await rows(db, 'fragile')).map((row) => [row.name, row.count]), [['a', 1], ['b', 1], ['boom', 1], ['c', 1]], 'applied exactly once after recovery');
    t.match(await runner.status(), [{ name: 'fragile', state: 'running', lastError: null, lag: 0 }, { name: 'healthy' }]);
  });

  withFixture("a failure's message is kept bounded, its start and its end: a batch's SQL can be megabytes", async (t, { db, store }) => {
    await createRowsTable(db, 'verbose');
    const poison = `boom-${'x'.repeat(200_000)}-end`;
    const runner = new ProjectionRunner(store, db, [countingProjection('verbose', { failOn: () => poison })], { retryBaseMs: 20, retryMaxMs: 50 });
    t.teardown(() => runner.stop());
    await store.append('s-1', [thing(poison)], 'no_stream');
    await runner.start();
    const deadline = Date.now() + 10_000;
    let status = (await runner.status())[0];
    while (status.state !== 'failed' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      status = (await runner.status())[0];
    }
    t.equal(status.state, 'failed');
    t.ok((status.lastError ?? '').length < 2100, `bounded (${(status.lastError ?? '').length} characters)`);
    t.match(status.lastError, /^cannot project boom-x+ … \(\d+ characters left out\) … x+-end$/);
  });

  withFixture('rebuild yields the same rows as the live run, then follows live', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')], { batchSize: 4 });
    t.teardown(() => runner.stop());
    await runner.start();
    let last = 0;
    for (let round = 0; round < 6; round += 1) {
      const result = await store.append(`s-${round % 2}`, [thing(`n${round % 3}`), thing(`m${round}`), thing('shared')], 'any');
      last = result.lastPosition;
    }
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    const live = await rows(db, 'things');
    await db.knex('things_rows').insert({ name: 'junk', count: 99, last_position: 0 }); // must not survive
    const progress: Array<[number, number]> = [];
    await runner.rebuild('things', (done, total) => progress.push([done, total]));
    t.same(await rows(db, 'things'), live, 'rebuilt rows equal the live rows');
    t.same(progress[0], [0, last], 'progress starts at 0 of the head');
    t.same(progress.at(-1), [last, last], 'progress ends at the head');
    t.ok(progress.every(([done], index) => index === 0 || done >= progress[index - 1][0]), 'progress never goes back');
    t.match(await runner.status(), [{ state: 'running', position: last, lag: 0 }]);

    const after = await store.append('s-9', [thing('later')], 'no_stream');
    await runner.waitFor(after.lastPosition, APPLIED_WITHIN_MS);
    t.ok((await rows(db, 'things')).some((row) => row.name === 'later'), 'live again after the rebuild');
    await t.rejects(runner.rebuild('nope'), /unknown projection nope/);
  });

  withFixture('a rebuild reads in batches of rebuildBatchSize, live lanes in batches of batchSize', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const batches: Array<{ asked: number | undefined; delivered: number }> = [];
    const recording: EventStore = {
      ...store,
      subscribe: (options) => store.subscribe({ ...options, handler: (batch) => (batches.push({ asked: options.batchSize, delivered: batch.length }), options.handler(batch)) }),
    };
    const runner = new ProjectionRunner(recording, db, [countingProjection('things')], { batchSize: 3, rebuildBatchSize: 7, minBatchIntervalMs: 0 });
    t.teardown(() => runner.stop());
    const appended = await store.append('s-1', Array.from({ length: 20 }, (_, i) => thing(`n${i}`)), 'no_stream');
    await runner.start();
    await runner.waitFor(appended.lastPosition, APPLIED_WITHIN_MS);
    t.ok(batches.length > 0 && batches.every((batch) => batch.asked === 3 && batch.delivered <= 3), 'started behind, but not rebuilding: batches of 3');
    batches.length = 0;
    await runner.rebuild('things');
    t.ok(batches.every((batch) => batch.asked === 7), 'the rebuild asks for 7');
    t.equal(Math.max(...batches.map((batch) => batch.delivered)), 7, 'and gets batches of 7');
    t.equal((await rows(db, 'things')).length, 20, 'every event applied once more');
  });

  withFixture('standalone rebuild (the CLI) with a progress bar stops at the head', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const appended = await store.append('s-1', [thing('a'), thing('b')], 'no_stream');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')]);
    let output = '';
    const sink = Object.assign(
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          output += chunk.toString();
          done();
        },
      }),
      { isTTY: true }, // cli-progress draws only on a terminal
    );
    await rebuildWithProgressBar(runner, 'things', sink);
    t.equal((await rows(db, 'things')).length, 2);
    t.match(await runner.status(), [{ state: 'stopped', position: appended.lastPosition, lag: 0 }]);
    t.match(output, /things/, 'the bar was drawn');
    await store.append('s-1', [thing('c')], 1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    t.equal((await rows(db, 'things')).length, 2, 'nothing follows live after a standalone rebuild');
    await t.rejects(rebuildWithProgressBar(runner, 'missing', sink), /unknown projection/);
  });

  withFixture('a standalone rebuild stopped by SIGINT stops between batches and says where it stood', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const appended = await store.append('s-1', Array.from({ length: 40 }, (_, i) => thing(`n${i}`)), 'no_stream');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')], { rebuildBatchSize: 4, minBatchIntervalMs: 0 });
    const signals = new EventEmitter();
    // The signal comes with the first batch's progress, as a Ctrl-C during the rebuild.
    const interrupting: Pick<ProjectionRunner, 'rebuild' | 'stop' | 'status'> = {
      rebuild: (name, onProgress) =>
        runner.rebuild(name, (done, total) => {
          if (done > 0) signals.emit('SIGINT');
          onProgress?.(done, total);
        }),
      stop: () => runner.stop(),
      status: () => runner.status(),
    };
    const end = await rebuildUntilInterrupted(interrupting, 'things', signals, new Writable({ write: (_chunk, _encoding, done) => done() }));
    t.match(end, { interruptedBy: 'SIGINT', total: appended.lastPosition });
    const stoppedAt = end.interruptedBy === null ? -1 : end.position;
    t.ok(stoppedAt > 0 && stoppedAt < appended.lastPosition, `stopped part-way, at ${stoppedAt}`);
    t.equal((await rows(db, 'things')).length, stoppedAt, 'rows and checkpoint agree');
    t.equal(signals.listenerCount('SIGINT') + signals.listenerCount('SIGTERM'), 0, 'its signal handlers are gone');

    const finished = await rebuildUntilInterrupted(runner, 'things', signals, new Writable({ write: (_chunk, _encoding, done) => done() }));
    t.same(finished, { interruptedBy: null }, 'the next rebuild completes it');
    t.equal((await rows(db, 'things')).length, 40);
  });

  withFixture("a rebuild the runner's stop ends rejects as stopped, not failed (the service logs it as a warning)", async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    await store.append('s-1', Array.from({ length: 40 }, (_, i) => thing(`n${i}`)), 'no_stream');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')], { rebuildBatchSize: 4, minBatchIntervalMs: 0 });
    const rebuilding = runner.rebuild('things', (done) => {
      if (done > 0) void runner.stop();
    });
    await t.rejects(rebuilding, new ProjectionRebuildStoppedError('things'));
    t.equal(await rebuilding.catch((error: unknown) => error instanceof ProjectionRebuildStoppedError), true);
  });

  /** The end of a rebuild under way as the checkpoint row keeps it; null when none is. */
  const storedRebuildTarget = async (db: Database, name: string): Promise<number | null> => {
    const row = (await db.knex('projection_checkpoints').where({ name }).first('rebuild_target')) as { rebuild_target: string | number | null };
    return row.rebuild_target === null ? null : Number(row.rebuild_target);
  };

  for (const how of ['the service', 'a Ctrl-C of the offline rebuild'] as const) {
    withFixture(`a rebuild stopped part-way by ${how} resumes as a rebuild at the next start, until its end`, async (t, { db, store }) => {
      await createRowsTable(db, 'things');
      const appended = await store.append('s-1', Array.from({ length: 40 }, (_, i) => thing(`n${i}`)), 'no_stream');
      const first = new ProjectionRunner(store, db, [countingProjection('things')], { rebuildBatchSize: 4, minBatchIntervalMs: 0 });
      if (how === 'the service') {
        await first.start();
        await first.waitFor(appended.lastPosition, APPLIED_WITHIN_MS);
      }
      const rebuilding = first.rebuild('things', (done) => {
        if (done > 0) void first.stop();
      });
      await t.rejects(rebuilding, new ProjectionRebuildStoppedError('things'));
      const stoppedAt = await checkpoint(db, 'things');
      t.ok(stoppedAt > 0 && stoppedAt < appended.lastPosition, `stopped part-way, at ${stoppedAt}`);

      // `projections list` with no service: a runner that is not started reads the checkpoints.
      const offline = new ProjectionRunner(store, db, [countingProjection('things')]);
      t.match(
        await offline.status(),
        [{ name: 'things', state: 'stopped', position: stoppedAt, lastError: `its rebuild stopped at position ${stoppedAt} of ${appended.lastPosition}, so its read model holds only part of the log; the next start (factlog serve) or \`factlog projections rebuild things\` completes it` }],
        'offline, the half-done rebuild is said, not a plain stopped',
      );

      // The next start on the same database: its batches wait at the gate until the checks are
      // done, before the runner opens their transaction (on PGlite it would hold the checks' connection).
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const gated: EventStore = { ...store, subscribe: (options) => store.subscribe({ ...options, handler: async (batch) => (await gate, options.handler(batch)) }) };
      const second = new ProjectionRunner(gated, db, [countingProjection('things')], { rebuildBatchSize: 4, minBatchIntervalMs: 0 });
      t.teardown(() => {
        release(); // a failed check must not leave its batch held: stop() waits for it
        return second.stop();
      });
      await second.start();
      t.match(await second.status(), [{ name: 'things', state: 'rebuilding', position: stoppedAt, lag: appended.lastPosition - stoppedAt }], 'rebuilding, not running with a lag');
      t.equal(await second.caughtUp(stoppedAt, 0), false, 'what was written is not all readable');
      t.equal(await second.projectionReached('things', stoppedAt, 0), false, 'nor reached, whatever its position');
      await second.waitFor(appended.lastPosition, 0); // rebuilding: not waited for, as a live rebuild is not
      t.equal(await storedRebuildTarget(db, 'things'), appended.lastPosition, 'the checkpoint keeps the end it was rebuilding to');

      release();
      await waitUntil(async () => (await second.status())[0].state === 'running', APPLIED_WITHIN_MS, 'the resumed rebuild to end');
      t.match(await second.status(), [{ name: 'things', state: 'running', position: appended.lastPosition, lag: 0 }]);
      t.equal(await storedRebuildTarget(db, 'things'), null, 'cleared with the checkpoint that reached the end');
      const replayed = await rows(db, 'things');
      t.equal(replayed.length, 40, 'every event applied');
      t.ok(replayed.every((row) => row.count === 1), 'each once');
      t.equal(await second.projectionReached('things', appended.lastPosition, APPLIED_WITHIN_MS), true);

      // A later start finds no rebuild: it runs.
      await second.stop();
      t.match(await new ProjectionRunner(store, db, [countingProjection('things')]).status(), [{ state: 'stopped', lastError: null }], 'offline, a completed rebuild leaves nothing to say');
      const third = new ProjectionRunner(store, db, [countingProjection('things')], { minBatchIntervalMs: 0 });
      t.teardown(() => third.stop());
      await third.start();
      t.match(await third.status(), [{ state: 'running', position: appended.lastPosition }]);
    });
  }

  withFixture('a rebuild of an empty log keeps no end to resume', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const runner = new ProjectionRunner(store, db, [countingProjection('things')]);
    await runner.rebuild('things');
    t.equal(await storedRebuildTarget(db, 'things'), null);
    t.teardown(() => runner.stop());
    await runner.start();
    t.match(await runner.status(), [{ state: 'running', position: 0 }]);
  });

  withFixture('a failing standalone rebuild rejects', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    await store.append('s-1', [thing('a'), thing('boom')], 'no_stream');
    const runner = new ProjectionRunner(store, db, [countingProjection('things', { failOn: () => 'boom' })]);
    await t.rejects(runner.rebuild('things'), /rebuild of things failed: cannot project boom/);
    t.match(await runner.status(), [{ state: 'failed' }]);
    t.same(await rows(db, 'things'), []);
    await runner.stop();
  });

  withFixture('waitFor resolves at the position and times out when a projection lags', async (t, { db, store }) => {
    await createRowsTable(db, 'slow');
    let release!: () => void;
    let gate: Promise<void> = Promise.resolve();
    const runner = new ProjectionRunner(store, db, [countingProjection('slow', { beforeApply: () => gate })]);
    t.teardown(() => runner.stop());
    await runner.start();
    const first = await store.append('s-1', [thing('a')], 'no_stream');
    await runner.waitFor(first.lastPosition, APPLIED_WITHIN_MS);
    await runner.waitFor(0, 10); // already reached: resolves at once

    gate = new Promise<void>((resolve) => (release = resolve));
    let reached = false;
    const pending = await store.append('s-1', [thing('b')], 0);
    const waiting = runner.waitFor(pending.lastPosition, APPLIED_WITHIN_MS).then(() => (reached = true));
    const timeout = await t.rejects(runner.waitFor(pending.lastPosition, 100), ProjectionWaitTimeoutError);
    t.match(timeout, { position: pending.lastPosition, behind: [`slow at ${first.lastPosition}`] });
    const write = { position: pending.lastPosition, streamId: 's-1', streamVersion: pending.nextExpectedVersion, types: ['ThingHappened'] };
    await t.rejects(runner.settle(write, 100), { name: 'ProjectionWaitTimeoutError', unapplied: ['slow'] }, 'settle names the projection that had not applied the write (src/app/lockMarks.ts)');
    t.notOk(reached, 'not reached while the projection is held');
    t.equal(await runner.caughtUp(pending.lastPosition, 50), false, 'caughtUp answers false where waitFor times out');
    t.equal(await runner.caughtUp(first.lastPosition, 50), true);
    t.equal(await runner.projectionReached('slow', pending.lastPosition, 50), false, 'projectionReached: not while it is held');
    const reachedLater = runner.projectionReached('slow', pending.lastPosition, APPLIED_WITHIN_MS);
    // (No status() here: on PGlite the held projection transaction owns the only connection.)
    release();
    await waiting;
    t.ok(reached);
    t.equal(await reachedLater, true, 'projectionReached: once it applied the position');
    t.match(await runner.status(), [{ lag: 0 }]);

    // A rebuild empties the tables first: until its replay is done, the log is not all readable.
    gate = new Promise<void>((resolve) => (release = resolve));
    let rebuilt = false;
    const rebuilding = runner.rebuild('slow').then(() => (rebuilt = true));
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.notOk(rebuilt, 'the replay is held');
    t.equal(await runner.caughtUp(pending.lastPosition, 50), false, 'not caught up while a projection is rebuilt');
    t.equal(await runner.projectionReached('slow', first.lastPosition, 50), false, 'nor has the rebuilt projection reached a position');
    release();
    await rebuilding;
    t.equal(await runner.caughtUp(pending.lastPosition, 50), true, 'caught up once the rebuild is done');
  });

  withFixture('two runners of one projection apply every event once', async (t, { db, store }) => {
    await createRowsTable(db, 'things');
    const first = new ProjectionRunner(store, db, [countingProjection('things')], { batchSize: 2 });
    const second = new ProjectionRunner(store, db, [countingProjection('things')], { batchSize: 3 });
    t.teardown(async () => {
      await first.stop();
      await second.stop();
    });
    await Promise.all([first.start(), second.start()]);
    let last = 0;
    for (let index = 0; index < 20; index += 1) last = (await store.append('s-1', [thing('same')], 'any')).lastPosition;
    await Promise.all([first.waitFor(last, APPLIED_WITHIN_MS), second.waitFor(last, APPLIED_WITHIN_MS)]);
    t.same((await rows(db, 'things')).map((row) => row.count), [20], 'each event counted once');
  });

  withFixture('a shared batch whose checkpoint another runner moved is applied once, by one of them', async (t, { db, store }) => {
    // Runner `both` applies its two projections in one transaction per batch (on PGlite without a
    // lock, checking the checkpoints as it advances them); runner `one` moves `shared` meanwhile.
    for (const name of ['shared', 'own']) await createRowsTable(db, name);
    const both = new ProjectionRunner(store, db, [countingProjection('shared'), countingProjection('own')], { batchSize: 2, retryBaseMs: 10 });
    const one = new ProjectionRunner(store, db, [countingProjection('shared')], { batchSize: 3, retryBaseMs: 10 });
    t.teardown(async () => {
      await both.stop();
      await one.stop();
    });
    await Promise.all([both.start(), one.start()]);
    let last = 0;
    for (let index = 0; index < 20; index += 1) last = (await store.append(`s-${index}`, [thing('same')], 'no_stream')).lastPosition;
    await Promise.all([both.waitFor(last, APPLIED_WITHIN_MS), one.waitFor(last, APPLIED_WITHIN_MS)]);
    for (const name of ['shared', 'own']) {
      t.same((await rows(db, name)).map((row) => row.count), [20], `${name}: each event counted once`);
      t.equal(await checkpoint(db, name), last);
    }
    t.match(await both.status(), [{ state: 'running', lag: 0 }, { state: 'running', lag: 0 }]);
  });

  withFixture('one reading of the log feeds every projection', async (t, { db, store }) => {
    for (const name of ['first', 'second', 'third']) await createRowsTable(db, name);
    const counting = countingSubscriptions(store);
    let last = 0;
    for (let index = 0; index < 12; index += 1) last = (await store.append(`s-${index}`, [thing(`n${index % 4}`)], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(counting.store, db, ['first', 'second', 'third'].map((name) => countingProjection(name)), { batchSize: 5 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    t.equal(counting.opened(), 1, 'one subscription for three projections');
    t.equal(counting.delivered(), 12, 'each event read once');
    for (const name of ['first', 'second', 'third']) {
      t.same((await rows(db, name)).map((row) => row.count), [3, 3, 3, 3], `${name} applied every event once`);
      t.equal(await checkpoint(db, name), last);
    }
  });

  withFixture('a rebuild reads on a lane of its own, then rejoins the shared reading', async (t, { db, store }) => {
    for (const name of ['steady', 'rebuilt']) await createRowsTable(db, name);
    const counting = countingSubscriptions(store);
    let last = 0;
    for (let index = 0; index < 30; index += 1) last = (await store.append(`s-${index}`, [thing(`n${index % 3}`)], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(counting.store, db, [countingProjection('steady'), countingProjection('rebuilt')], { batchSize: 4 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    const rebuilding = runner.rebuild('rebuilt');
    const live = await store.append('s-live', [thing('live')], 'no_stream');
    await rebuilding;
    t.equal(counting.opened(), 2, 'the rebuild read from 0 on a second subscription');
    const after = await store.append('s-after', [thing('after')], 'no_stream');
    await runner.waitFor(Math.max(live.lastPosition, after.lastPosition), APPLIED_WITHIN_MS);
    await waitUntil(() => counting.running() === 1, APPLIED_WITHIN_MS, 'the lanes to merge');
    for (const name of ['steady', 'rebuilt']) {
      t.same((await rows(db, name)).map((row) => [row.name, row.count]), [['after', 1], ['live', 1], ['n0', 10], ['n1', 10], ['n2', 10]], `${name} holds every event once`);
    }
    t.match(await runner.status(), [{ state: 'running', lag: 0 }, { state: 'running', lag: 0 }]);
  });

  withFixture('rebuilds started together read the log once', async (t, { db, store }) => {
    const names = ['one', 'two', 'three', 'four'];
    for (const name of names) await createRowsTable(db, name);
    const counting = countingSubscriptions(store);
    let last = 0;
    for (let index = 0; index < 40; index += 1) last = (await store.append(`s-${index}`, [thing(`n${index % 4}`)], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(counting.store, db, names.map((name) => countingProjection(name)), { batchSize: 2, rebuildBatchSize: 2 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    const opened = counting.opened();
    const delivered = counting.delivered();
    await Promise.all(names.map((name) => runner.rebuild(name)));
    // Each rebuild empties its tables in a transaction of its own; the first done used to start
    // reading at once and leave the others lanes of their own (up to four readings of the log).
    t.equal(counting.opened() - opened, 1, 'one subscription replayed the log for all four');
    t.equal(counting.delivered() - delivered, last, 'and read each event once');
    for (const name of names) {
      t.same((await rows(db, name)).map((row) => [row.name, row.count]), [['n0', 10], ['n1', 10], ['n2', 10], ['n3', 10]], `${name} holds every event once`);
    }
  });

  withFixture('a second rebuild of a projection while the first empties its tables is refused; the first ends', async (t, { db, store }) => {
    await createRowsTable(db, 'twice');
    let last = 0;
    for (let index = 0; index < 6; index += 1) last = (await store.append(`s-${index}`, [thing(`n${index % 2}`)], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(store, db, [countingProjection('twice')], { batchSize: 2 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    // Both called before either has emptied the table: the second used to take the first's place and leave it waiting for ever.
    const first = runner.rebuild('twice');
    const second = runner.rebuild('twice');
    await t.rejects(second, /projection twice is already rebuilding/);
    await first;
    t.same((await rows(db, 'twice')).map((row) => [row.name, row.count]), [['n0', 3], ['n1', 3]], 'rebuilt once, each event once');
    await runner.rebuild('twice');
    t.match(await runner.status(), [{ state: 'running', position: last }], 'and it can be rebuilt again once it ended');
  });

  withFixture('a batch takes a transaction id only when its projection writes', async (t, { db, store }) => {
    // A projection that writes elsewhere (the OpenSearch index) keeps no transaction id open
    // while it works: on a server that id would hold back every global reader of the log.
    const external = externalProjection();
    const { seen } = external;
    const runner = new ProjectionRunner(store, db, [external], { batchSize: 2 });
    t.teardown(() => runner.stop());
    await runner.start();
    const last = (await store.append('s-1', [thing('a'), thing('b'), thing('c')], 'no_stream')).lastPosition;
    await runner.waitFor(last, APPLIED_WITHIN_MS);
    t.same(seen, [null, null, null], 'no id while the batch applies');
    t.equal(await checkpoint(db, 'external'), last, 'and the checkpoint still moves');
  });

  withFixture('live appends made while a batch pauses go in one batch; a waiter ends the pause', async (t, { db, store }) => {
    await createRowsTable(db, 'gathered');
    const batches: number[][] = [];
    const projection = countingProjection('gathered');
    const recording: Projection = {
      ...projection,
      async applyBatch(trx, events) {
        batches.push(events.map((event) => event.globalPosition));
        for (const event of events) await projection.apply(trx, event);
      },
    };
    // A pause far longer than the test: only a waiter or stop() can end it.
    const runner = new ProjectionRunner(store, db, [recording], { minBatchIntervalMs: 600_000 });
    await runner.start();
    const first = await store.append('s-1', [thing('a')], 'no_stream');
    await runner.waitFor(first.lastPosition, APPLIED_WITHIN_MS);
    const second = await store.append('s-1', [thing('b')], 0);
    const third = await store.append('s-2', [thing('c')], 'no_stream');
    // Readers see an append only once no older transaction is open anywhere on the server (its
    // snapshot's xmin): on a server shared with other tests, another database's transaction can
    // hide the third append from a read that sees the second. Wait until both are visible, so the
    // read the waiter lets through finds both.
    await waitUntil(async () => (await store.headPosition()) >= third.lastPosition, APPLIED_WITHIN_MS, 'both appends visible to readers');
    t.same(batches, [[first.lastPosition]], 'nothing applied while the runner pauses');
    await runner.waitFor(third.lastPosition, APPLIED_WITHIN_MS);
    t.same(batches, [[first.lastPosition], [second.lastPosition, third.lastPosition]], 'the two appends made during the pause were applied together');
    t.same((await rows(db, 'gathered')).map((row) => [row.name, row.count]), [['a', 1], ['b', 1], ['c', 1]]);
    // The runner pauses again after that batch; stopping ends the pause instead of waiting it out.
    await store.append('s-3', [thing('d')], 'no_stream');
    await runner.stop();
    t.match(await runner.status(), [{ state: 'stopped', position: third.lastPosition }], 'the append made during the pause was not applied before stop');
  });

  t.test('minBatchIntervalMs must be a number >= 0, catchUpTransactions an integer >= 1', async (t) => {
    const fixture = await openStore(open);
    t.teardown(() => fixture.close());
    t.throws(() => new ProjectionRunner(fixture.store, fixture.db, [], { minBatchIntervalMs: -1 }), RangeError);
    t.throws(() => new ProjectionRunner(fixture.store, fixture.db, [], { minBatchIntervalMs: Number.NaN }), RangeError);
    t.throws(() => new ProjectionRunner(fixture.store, fixture.db, [], { catchUpTransactions: 0 }), RangeError, 'catchUpTransactions must be at least 1');
    t.throws(() => new ProjectionRunner(fixture.store, fixture.db, [], { catchUpTransactions: 1.5 }), RangeError, 'and whole');
  });
}

for (const backend of backends) {
  t.test(backend.name, async (t) => runnerSuite(t, backend.open));
}

/**
 * A PGlite store whose database says a request waits, and how long ago the last came, when the
 * test says so (by default one just came: a busy node), with a rows table per name.
 */
async function openPgliteWithRequests(t: Test, tables: readonly string[]) {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(() => fixture.close());
  const requests = { waiting: false, msSinceLast: 0 };
  const db: Database = { ...fixture.db, requestsWaiting: () => requests.waiting, msSinceRequest: () => requests.msSinceLast };
  for (const name of tables) await createRowsTable(db, name);
  return { store: fixture.store, db, requests };
}

/** A counting projection whose batches log when they begin and end, and take a few ms (a timer, so another can run meanwhile). */
function observedProjection(name: string, log: string[], options: { startsWork?: boolean; onEvent?: () => void } = {}): Projection {
  const base = countingProjection(name);
  return {
    ...base,
    ...(options.startsWork ? { startsWork: true } : {}),
    async applyBatch(trx, events) {
      log.push(`${name} begins`);
      for (const event of events) {
        options.onEvent?.();
        await base.apply(trx, event);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
      log.push(`${name} ends`);
    },
  };
}

t.test('pglite: a waiting request splits a shared batch between projections; each event once, intake last', async (t) => {
  const { store, db, requests } = await openPgliteWithRequests(t, ['first', 'second', 'intake']);
  // What the batches did, in order: transactions and which projection applied (once per run of events).
  const log: string[] = [];
  let recording = false;
  const note = (entry: string) => {
    if (recording && log.at(-1) !== entry) log.push(entry);
  };
  db.knex.on('query', (query: { sql: string }) => {
    if (/^(BEGIN|COMMIT)/i.test(query.sql)) note(query.sql.replace(/;$/, ''));
  });
  let poison: string | null = null;
  const counted = (name: string) => countingProjection(name, { beforeApply: async () => note(name), failOn: name === 'second' ? () => poison : undefined });
  // Listed before `second`, but it starts work: it commits last.
  const runner = new ProjectionRunner(store, db, [counted('first'), { ...counted('intake'), startsWork: true }, counted('second')], { retryBaseMs: 20, retryMaxMs: 50 });
  t.teardown(() => runner.stop());
  await runner.start();
  recording = true;

  const one = await store.append('s-1', [thing('a'), thing('b')], 'no_stream');
  await runner.waitFor(one.lastPosition, 10_000);
  t.same(log, ['BEGIN', 'first', 'second', 'intake', 'COMMIT'], 'no request waits: one transaction');

  log.length = 0;
  requests.waiting = true;
  const two = await store.append('s-2', [thing('a'), thing('c')], 'no_stream');
  await runner.waitFor(two.lastPosition, 10_000);
  t.same(log, ['BEGIN', 'first', 'COMMIT', 'BEGIN', 'second', 'COMMIT', 'BEGIN', 'intake', 'COMMIT'], 'a request waits: a transaction per projection');
  for (const name of ['first', 'second', 'intake']) {
    t.same((await rows(db, name)).map((row) => [row.name, row.count]), [['a', 2], ['b', 1], ['c', 1]], `${name}: each event applied once`);
    t.equal(await checkpoint(db, name), two.lastPosition);
  }

  // A projection that fails in a split batch: what committed before it stays, applied once.
  poison = 'boom';
  const three = await store.append('s-3', [thing('boom')], 'no_stream');
  await waitUntil(async () => (await runner.status()).some((status) => status.name === 'second' && status.state === 'failed'));
  await runner.waitFor(three.lastPosition, 10_000);
  for (const name of ['first', 'intake']) t.same((await rows(db, name)).find((row) => row.name === 'boom')?.count, 1, `${name} applied it once`);
  t.equal(await checkpoint(db, 'second'), two.lastPosition, 'the failed one did not move');
  poison = null;
  await waitUntil(async () => (await checkpoint(db, 'second')) === three.lastPosition);
  for (const name of ['first', 'second', 'intake']) {
    t.same((await rows(db, name)).find((row) => row.name === 'boom')?.count, 1, `${name}: once after the recovery too`);
  }
});

t.test('pglite: a projection whose cost is not known yet applies a first part of 20 events, and a waiting request gets a commit after it', async (t) => {
  const { store, db, requests } = await openPgliteWithRequests(t, ['fresh', 'other']);
  // Without the first small part, a projection's first run went whole: the first summary pass of a
  // repository held the connection for over half a second while a search waited.
  const fresh = countingProjection('fresh', { beforeApply: () => new Promise((resolve) => setTimeout(resolve, 2)) });
  const runner = new ProjectionRunner(store, db, [fresh, countingProjection('other')], { retryBaseMs: 20, retryMaxMs: 50 });
  t.teardown(() => runner.stop());
  await runner.start();
  // Every position fresh's checkpoint was moved to, in order.
  const moves: number[] = [];
  db.knex.on('query', (query: { sql: string; bindings?: unknown[] }) => {
    const [position, names] = query.bindings ?? [];
    if (/^UPDATE projection_checkpoints/i.test(query.sql) && Array.isArray(names) && names.includes('fresh')) moves.push(Number(position));
  });
  requests.waiting = true;
  const appended = await store.append('s-1', Array.from({ length: 60 }, (_, index) => thing(`e-${index}`)), 'no_stream');
  await runner.waitFor(appended.lastPosition, 20_000);
  const firstPosition = appended.lastPosition - 59;
  t.equal(moves[0], firstPosition + 19, 'the first commit ends after the first 20 events');
  t.ok(moves.length >= 2, `the rest followed in further commits (${moves.join(', ')})`);
  t.equal(moves.at(-1), appended.lastPosition, 'and reached the end');
  const counted = await rows(db, 'fresh');
  t.equal(counted.length, 60, 'every event applied');
  t.ok(counted.every((row) => row.count === 1), 'each once');
});

t.test('pglite: a long run of one projection\'s events goes in parts, and a waiting request gets a commit between them', async (t) => {
  const { store, db, requests } = await openPgliteWithRequests(t, ['slow', 'quick']);
  // Each of slow's events takes about 2 ms: its parts of about 25 ms hold about a dozen.
  const slow = countingProjection('slow', { beforeApply: () => new Promise((resolve) => setTimeout(resolve, 2)) });
  const quick = countingProjection('quick');
  const runner = new ProjectionRunner(store, db, [slow, quick], { retryBaseMs: 20, retryMaxMs: 50 });
  t.teardown(() => runner.stop());
  await runner.start();
  const transactions = { begun: 0 };
  db.knex.on('query', (query: { sql: string; bindings?: unknown[] }) => {
    if (/^BEGIN/i.test(query.sql)) transactions.begun += 1;
  });
  const appendMany = async (stream: string, count: number) => store.append(stream, Array.from({ length: count }, (_, index) => thing(`${stream}-${index}`)), 'no_stream');

  // No request waits: one transaction for the whole batch, whatever its parts (the first run also
  // tells the runner what slow's events cost).
  const first = await appendMany('s-1', 40);
  await runner.waitFor(first.lastPosition, 20_000);
  t.equal(transactions.begun, 1, 'no request waits: one transaction');

  // A request waits all along: a commit after each part of slow's events.
  transactions.begun = 0;
  requests.waiting = true;
  const positions: number[] = [];
  const watcher = setInterval(() => {
    void checkpoint(db, 'slow').then((position) => {
      if (positions.at(-1) !== position) positions.push(position);
    });
  }, 1);
  const second = await appendMany('s-2', 60);
  await runner.waitFor(second.lastPosition, 20_000);
  clearInterval(watcher);
  t.ok(transactions.begun >= 3, `a request waits: slow's 60 events in several transactions (${transactions.begun})`);
  t.equal(await checkpoint(db, 'slow'), second.lastPosition, 'slow reached the end of the batch');
  t.equal(await checkpoint(db, 'quick'), second.lastPosition, 'so did quick');
  for (const name of ['slow', 'quick']) {
    const counted = await rows(db, name);
    t.equal(counted.length, 100, `${name}: every event applied`);
    t.ok(counted.every((row) => row.count === 1), `${name}: each once`);
  }
  const between = positions.filter((position) => position > first.lastPosition && position < second.lastPosition);
  t.ok(between.length > 0, `slow's checkpoint stood between batches, at the end of a part (${between.join(', ')})`);
});

t.test('pglite: on a quiet node the read models apply side by side, the intake after them; one after the other while requests come', async (t) => {
  const { store, db, requests } = await openPgliteWithRequests(t, ['first', 'second', 'intake']);
  const log: string[] = [];
  const runner = new ProjectionRunner(
    store,
    db,
    [observedProjection('first', log), observedProjection('intake', log, { startsWork: true }), observedProjection('second', log)],
    { retryBaseMs: 20, retryMaxMs: 50 },
  );
  t.teardown(() => runner.stop());
  await runner.start();

  const busy = await store.append('s-1', [thing('a'), thing('b')], 'no_stream');
  await runner.waitFor(busy.lastPosition, 10_000);
  t.same(log, ['first begins', 'first ends', 'second begins', 'second ends', 'intake begins', 'intake ends'], 'busy: one after the other');

  log.length = 0;
  requests.msSinceLast = 60_000;
  const quiet = await store.append('s-2', [thing('a'), thing('c')], 'no_stream');
  await runner.waitFor(quiet.lastPosition, 10_000);
  t.same(log.slice(0, 2).sort(), ['first begins', 'second begins'], 'quiet: the second begins before the first ends');
  t.same(log.slice(4), ['intake begins', 'intake ends'], 'the intake after both ended');
  for (const name of ['first', 'second', 'intake']) {
    t.same((await rows(db, name)).map((row) => [row.name, row.count]), [['a', 2], ['b', 1], ['c', 1]], `${name}: each event applied once`);
    t.equal(await checkpoint(db, name), quiet.lastPosition);
  }
});

t.test('pglite: a request that comes while the read models apply side by side cuts them all at one position; each event once', async (t) => {
  const { store, db, requests } = await openPgliteWithRequests(t, ['first', 'second']);
  requests.msSinceLast = 60_000;
  const log: string[] = [];
  let applied = 0;
  // The request comes during the first slice (20 events while the group's cost is unknown).
  const onEvent = () => {
    applied += 1;
    if (applied === 5) requests.waiting = true;
  };
  const runner = new ProjectionRunner(store, db, [observedProjection('first', log, { onEvent }), observedProjection('second', log)], { retryBaseMs: 20, retryMaxMs: 50 });
  t.teardown(() => runner.stop());
  await runner.start();
  const moves: Array<{ names: string[]; position: number }> = [];
  db.knex.on('query', (query: { sql: string; bindings?: unknown[] }) => {
    const [position, names] = query.bindings ?? [];
    if (/^UPDATE projection_checkpoints/i.test(query.sql) && Array.isArray(names)) moves.push({ names: names.map(String).sort(), position: Number(position) });
  });
  const appended = await store.append('s-1', Array.from({ length: 60 }, (_, index) => thing(`e-${index}`)), 'no_stream');
  const firstPosition = appended.lastPosition - 59;
  await waitUntil(() => moves.length > 0);
  requests.waiting = false;
  await runner.waitFor(appended.lastPosition, 20_000);
  t.same(moves[0], { names: ['first', 'second'], position: firstPosition + 19 }, 'the first commit: both, through the first slice');
  for (const name of ['first', 'second']) {
    const counted = await rows(db, name);
    t.equal(counted.length, 60, `${name}: every event applied`);
    t.ok(counted.every((row) => row.count === 1), `${name}: each once`);
    t.equal(await checkpoint(db, name), appended.lastPosition, `${name} reached the end`);
  }
});

t.test('pglite: parts are short while requests come and longer on a quiet node', async (t) => {
  const fixture = await openPgliteWithRequests(t, ['parted', 'other']);
  const { db } = fixture;
  // Each event costs 1 ms on the runner's clock (`now`), which only this work moves: the part
  // sizes the runner chose (what applyBatch was called with) follow from that cost alone. Timed
  // by the machine's clock (a busy wait of 1 ms an event), a process preempted during one part
  // measured a higher cost there than in another, and the parts followed the machine's load.
  let clock = 0;
  const partSizes: number[] = [];
  const base = countingProjection('parted');
  const parted: Projection = {
    ...base,
    async applyBatch(trx, events) {
      partSizes.push(events.length);
      for (const event of events) {
        clock += 1;
        await base.apply(trx, event);
      }
    },
  };
  // `other` starts work, so it does not go side by side with `parted`: the parts are parted's own.
  const runner = new ProjectionRunner(fixture.store, db, [parted, { ...countingProjection('other'), startsWork: true }], {
    retryBaseMs: 20,
    retryMaxMs: 50,
    now: () => clock,
  });
  t.teardown(() => runner.stop());
  await runner.start();
  const appendMany = async (stream: string, count: number) => fixture.store.append(stream, Array.from({ length: count }, (_, index) => thing(`${stream}-${index}`)), 'no_stream');

  // The first batch tells the runner the cost per event (a first part of 20 events).
  await runner.waitFor((await appendMany('s-1', 40)).lastPosition, 20_000);
  partSizes.length = 0;
  const busy = await appendMany('s-2', 60);
  await runner.waitFor(busy.lastPosition, 20_000);
  const whileBusy = [...partSizes];
  partSizes.length = 0;
  fixture.requests.msSinceLast = 60_000;
  const quiet = await appendMany('s-3', 60);
  await runner.waitFor(quiet.lastPosition, 20_000);
  const whileQuiet = [...partSizes];
  t.equal(whileBusy.reduce((sum, size) => sum + size, 0), 60, `every event of the busy batch applied (${whileBusy.join(', ')})`);
  t.equal(whileQuiet.reduce((sum, size) => sum + size, 0), 60, `every event of the quiet batch applied (${whileQuiet.join(', ')})`);
  // 25 ms parts at 1 ms an event hold at most 25; 100 ms parts hold at least three times as many as the
  // busy ones (four times the budget), or the whole batch.
  t.ok(Math.max(...whileBusy) <= 25, 'busy: parts of about 25 ms');
  t.ok(Math.max(...whileQuiet) >= Math.min(60, 3 * Math.max(...whileBusy)), 'quiet: parts of about 100 ms');
  t.equal((await rows(db, 'parted')).length, 160, 'each event once');
});
