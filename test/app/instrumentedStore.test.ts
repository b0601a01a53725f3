import t from 'tap';
import { createMetrics } from '../../src/app/metrics.js';
import { instrumentEventStore } from '../../src/app/instrumentedStore.js';
import { openMemoryPglite, openStore, thing } from '../eventstore/contract.js';

/** What the counters say, by label set. */
async function counted(metrics: ReturnType<typeof createMetrics>): Promise<Record<string, number>> {
  const values: Record<string, number> = {};
  for (const metric of [metrics.appends, metrics.appendedEvents]) {
    for (const { labels, value } of (await metric.get()).values) values[Object.values(labels).join(',')] = value;
  }
  return values;
}

t.test('appends are counted by outcome and type, one stream or many at once', async (t) => {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(() => fixture.close());
  const metrics = createMetrics({ projectionStatus: async () => [], jobCounts: async () => ({}) });
  const store = instrumentEventStore(fixture.store, metrics);
  await store.append('counted-a', [thing('a1')], 'no_stream');
  await t.rejects(store.append('counted-a', [thing('a2')], 'no_stream'));
  const outcomes = await store.appendToStreams([
    { streamId: 'counted-a', events: [thing('a2'), thing('a3')], expected: 0 },
    { streamId: 'counted-b', events: [thing('b1')], expected: 0 },
  ]);
  t.same(outcomes.map((outcome) => Boolean(outcome.conflict)), [false, true]);
  t.same(await counted(metrics), { ok: 2, conflict: 2, ThingHappened: 3 }, 'each part counts as an append; events of refused parts do not count');
  t.same((await store.readStreams(['counted-a'])).get('counted-a')?.length, 3, 'reads go through to the store');
});
