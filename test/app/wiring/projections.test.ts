import t from 'tap';
import type { Knex } from 'knex';
import pino from 'pino';
import type { RecordedEvent } from '../../../src/eventstore/envelope.js';
import type { Projection } from '../../../src/projection/types.js';
import { createProjectionRunner, type RebuildStrategy } from '../../../src/app/wiring/projections.js';
import { openMemoryPglite, openStore, thing, waitUntil } from '../../eventstore/contract.js';

/** Keeps one row per ThingHappened name; `names` reads them back. */
function namesProjection(name: string): Projection {
  return {
    name,
    eventTypes: ['ThingHappened'],
    tables: [`${name}_names`],
    async apply(trx: Knex.Transaction, event: RecordedEvent) {
      await trx.raw(`INSERT INTO ?? (name) VALUES (?) ON CONFLICT DO NOTHING`, [`${name}_names`, String(event.data.name)]);
    },
  };
}

t.test('rebuild follows a projection\'s own strategy where it has one, the runner\'s elsewhere', async (t) => {
  const fixture = await openStore(openMemoryPglite, { pollIntervalMs: 10 });
  t.teardown(() => fixture.close());
  for (const name of ['plain', 'custom']) await fixture.db.knex.raw(`CREATE TABLE ?? (name text PRIMARY KEY)`, [`${name}_names`]);
  const names = async (projection: string) =>
    ((await fixture.db.knex(`${projection}_names`).select('name').orderBy('name')) as Array<{ name: string }>).map((row) => row.name);

  let strategyRuns = 0;
  const customRebuild: RebuildStrategy = async (onProgress) => {
    strategyRuns += 1;
    onProgress?.(2, 2);
  };
  const runner = createProjectionRunner({
    store: fixture.store,
    db: fixture.db,
    bus: null,
    projections: [namesProjection('plain'), namesProjection('custom')],
    rebuildStrategies: new Map([['custom', customRebuild]]),
    groupPrefix: 'test',
    log: pino({ level: 'silent' }),
  });
  await fixture.store.append('thing-1', [thing('a'), thing('b')], 'any');
  await runner.start();
  t.teardown(() => runner.stop());
  await waitUntil(async () => (await names('plain')).length === 2 && (await names('custom')).length === 2);

  // Rows the log does not hold: only a truncate-and-replay removes them.
  for (const projection of ['plain', 'custom']) await fixture.db.knex(`${projection}_names`).insert({ name: 'stray' });

  const progress: Array<[number, number]> = [];
  await runner.rebuild('custom', (done, total) => progress.push([done, total]));
  t.equal(strategyRuns, 1, 'the strategy ran');
  t.same(progress, [[2, 2]], 'with the caller\'s progress callback');
  t.same(await names('custom'), ['a', 'b', 'stray'], 'the runner did not empty and replay the projection');

  await runner.rebuild('plain');
  t.same(await names('plain'), ['a', 'b'], 'the runner emptied and replayed the other one');
  t.equal(strategyRuns, 1, 'the strategy was not used for it');

  await t.rejects(runner.rebuild('missing'), 'an unknown projection is still refused by the runner');
  t.same((await runner.status()).map((status) => status.name).sort(), ['custom', 'plain'], 'status comes from the runner');
});

t.test('a strategy underway shows as rebuilding, refuses a second rebuild, and ends as it began', async (t) => {
  const fixture = await openStore(openMemoryPglite, { pollIntervalMs: 10 });
  t.teardown(() => fixture.close());
  await fixture.db.knex.raw(`CREATE TABLE custom_names (name text PRIMARY KEY)`);
  let release = (): void => undefined;
  let runs = 0;
  const slowRebuild: RebuildStrategy = async () => {
    runs += 1;
    await new Promise<void>((resolve) => (release = resolve));
  };
  const runner = createProjectionRunner({
    store: fixture.store,
    db: fixture.db,
    bus: null,
    projections: [namesProjection('custom')],
    rebuildStrategies: new Map([['custom', slowRebuild]]),
    groupPrefix: 'test',
    log: pino({ level: 'silent' }),
  });
  await runner.start();
  t.teardown(() => runner.stop());
  const stateOf = async () => (await runner.status()).find((status) => status.name === 'custom')?.state;
  t.equal(await stateOf(), 'running');

  const first = runner.rebuild('custom');
  t.equal(await stateOf(), 'rebuilding', 'the status says so while the strategy runs');
  await t.rejects(runner.rebuild('custom'), /projection custom is already rebuilding/, 'a second rebuild is refused');
  t.equal(runs, 1, 'and did not start the strategy again');
  release();
  await first;
  t.equal(await stateOf(), 'running', 'the state is the runner\'s again once it ends');

  const failing = createProjectionRunner({
    store: fixture.store,
    db: fixture.db,
    bus: null,
    projections: [namesProjection('custom')],
    rebuildStrategies: new Map([['custom', async () => Promise.reject(new Error('index unreachable'))]]),
    groupPrefix: 'test-failing',
    log: pino({ level: 'silent' }),
  });
  await t.rejects(failing.rebuild('custom'), /index unreachable/);
  await t.rejects(failing.rebuild('custom'), /index unreachable/, 'a failed strategy does not leave the projection marked as rebuilding');
});
