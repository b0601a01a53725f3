import t, { type Test } from 'tap';
import { createLogBus, readLogBusCheckpoint } from '../../src/bus/log.js';
import type { Knex } from 'knex';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { metadata, openMemoryPglite, openStore, thing, waitUntil } from '../eventstore/contract.js';
import { deferred, recordingLogger } from './helpers.js';

async function fixture(t: Test) {
  const store = await openStore(openMemoryPglite, { pollIntervalMs: 10 });
  t.teardown(() => store.close());
  return store;
}

/** The group's checkpoint once it reaches `expected`, or whatever it is after `timeoutMs`. */
async function checkpointWhen(knex: Knex, group: string, expected: number, timeoutMs = 5_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const checkpoint = await readLogBusCheckpoint(knex, group);
    if (checkpoint === expected || Date.now() > deadline) return checkpoint;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const other = (value: number) => ({ type: 'OtherHappened', data: { value }, metadata });

t.test('the checkpoint moves only after the handler resolves', async (t) => {
  const { store, db } = await fixture(t);
  await store.append('thing-1', [thing('a'), thing('b'), thing('c')], 'no_stream');
  const bus = createLogBus({ store, db });
  t.teardown(() => bus.close());
  const release = deferred();
  const received: RecordedEvent[][] = [];
  await bus.consume({
    group: 'g1',
    types: ['ThingHappened'],
    handler: async (batch) => {
      received.push(batch);
      await release.promise;
    },
  });
  await waitUntil(() => received.length === 1, 5_000, 'first batch');
  t.same(received[0].map((event) => event.data.name), ['a', 'b', 'c']);
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(await readLogBusCheckpoint(db.knex, 'g1'), 0, 'not acknowledged while the handler runs');
  release.resolve();
  t.equal(await checkpointWhen(db.knex, 'g1', 3), 3, 'acknowledged after the handler');
  t.equal(received.length, 1, 'delivered once');
});

t.test('types filter; a failing handler gets the same batch again; restart resumes after the checkpoint', async (t) => {
  const { store, db } = await fixture(t);
  await store.append('thing-1', [thing('a'), thing('b')], 'no_stream');
  await store.append('other-1', [other(1)], 'no_stream');
  await store.append('thing-2', [thing('c')], 'no_stream');
  const log = recordingLogger();
  const bus = createLogBus({ store, db, log, retryBaseMs: 10 });
  const deliveries: string[][] = [];
  let failuresLeft = 1;
  const consumer = await bus.consume({
    group: 'projection.things',
    types: ['ThingHappened'],
    handler: async (batch) => {
      deliveries.push(batch.map((event) => String(event.data.name)));
      if (failuresLeft > 0) {
        failuresLeft -= 1;
        throw new Error('read model unavailable');
      }
    },
  });
  await waitUntil(() => deliveries.length === 2, 5_000, 'redelivery');
  t.same(deliveries, [['a', 'b', 'c'], ['a', 'b', 'c']], 'the failed batch came again, other types never did');
  t.ok(log.entries.some((entry) => entry.level === 'warn' && entry.details.error === 'read model unavailable'), 'the failure was logged');
  t.equal(await checkpointWhen(db.knex, 'projection.things', 4), 4, 'checkpoint at the last delivered event');
  await consumer.stop();

  await store.append('thing-1', [thing('d')], 1);
  await store.append('other-1', [other(2)], 0);
  const later: string[] = [];
  const restarted = createLogBus({ store, db });
  t.teardown(() => restarted.close());
  await restarted.consume({
    group: 'projection.things',
    types: ['ThingHappened'],
    handler: async (batch) => {
      later.push(...batch.map((event) => String(event.data.name)));
    },
  });
  const fresh: number[] = [];
  await restarted.consume({
    group: 'stage.other',
    types: ['OtherHappened'],
    handler: async (batch) => {
      fresh.push(...batch.map((event) => Number(event.data.value)));
    },
  });
  await waitUntil(() => later.length >= 1 && fresh.length >= 2, 5_000, 'deliveries after restart');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.same(later, ['d'], 'only what came after the checkpoint');
  t.same(fresh, [1, 2], 'a new group starts from the beginning');
  await bus.close();
});

t.test('bad consumer options are refused', async (t) => {
  const { store, db } = await fixture(t);
  const bus = createLogBus({ store, db });
  t.teardown(() => bus.close());
  const handler = async () => undefined;
  await t.rejects(bus.consume({ group: '', types: ['ThingHappened'], handler }), /group must be a non-empty string/);
  await t.rejects(bus.consume({ group: 'g', types: [], handler }), /types must name at least one event type/);
  await t.rejects(bus.consume({ group: 'g', types: [''], handler }), /every type must be a non-empty string/);
  await bus.consume({ group: 'g', types: ['ThingHappened'], handler });
  await t.rejects(bus.consume({ group: 'g', types: ['ThingHappened'], handler }), /already has a consumer/);
  await bus.close();
  await t.rejects(bus.consume({ group: 'h', types: ['ThingHappened'], handler }), /the bus is closed/);
});
