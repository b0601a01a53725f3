import t from 'tap';
import type { Knex } from 'knex';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { each, projection } from '../../src/projection/types.js';

type TestEvent =
  | { type: 'Opened'; data: { name: string } }
  | { type: 'Tagged'; data: { tag: string } }
  | { type: 'Closed'; data: { reason: string } };

/** The handlers are not given a real transaction here: none of them touches it. */
const trx = {} as Knex.Transaction;

let position = 0;
function recorded(streamId: string, type: TestEvent['type'], data: Record<string, unknown>): RecordedEvent {
  position += 1;
  return {
    eventId: `00000000-0000-4000-8000-${String(position).padStart(12, '0')}`,
    streamId,
    streamVersion: 0,
    globalPosition: position,
    type,
    schemaVersion: 1,
    repositoryId: null,
    actor: 'test',
    causationId: null,
    correlationId: null,
    data,
    occurredAt: new Date(0).toISOString(),
  };
}

/** A projection that logs each handler call as `Type:stream,stream`. */
function loggingProjection(batchTogether?: ReadonlyArray<ReadonlyArray<TestEvent['type']>>) {
  const calls: string[] = [];
  const log = (type: string) => async (_trx: Knex.Transaction, events: ReadonlyArray<{ streamId: string }>) => {
    calls.push(`${type}:${events.map((event) => event.streamId).join(',')}`);
  };
  const definition = projection<TestEvent>({
    name: 'logging',
    tables: [],
    ...(batchTogether ? { batchTogether } : {}),
    handlers: { Opened: log('Opened'), Tagged: log('Tagged'), Closed: log('Closed') },
  });
  return { definition, calls };
}

t.test('eventTypes are the handled types', async (t) => {
  t.same([...loggingProjection().definition.eventTypes].sort(), ['Closed', 'Opened', 'Tagged']);
});

t.test('a batch goes to the handlers in runs of one type, in log order', async (t) => {
  const { definition, calls } = loggingProjection();
  await definition.applyBatch?.(trx, [
    recorded('a', 'Opened', { name: 'a' }),
    recorded('b', 'Opened', { name: 'b' }),
    recorded('a', 'Tagged', { tag: 'x' }),
    recorded('b', 'Opened', { name: 'b2' }),
  ]);
  t.same(calls, ['Opened:a,b', 'Tagged:a', 'Opened:b']);
});

t.test('batchTogether makes one run of interleaved types, type by type, until a stream breaks the order', async (t) => {
  const { definition, calls } = loggingProjection([['Opened', 'Tagged']]);
  await definition.applyBatch?.(trx, [
    recorded('a', 'Opened', { name: 'a' }),
    recorded('a', 'Tagged', { tag: 'x' }),
    recorded('b', 'Opened', { name: 'b' }),
    recorded('b', 'Tagged', { tag: 'y' }),
    recorded('a', 'Tagged', { tag: 'z' }),
    // `a` was tagged: opening it again must come after, so the run ends here.
    recorded('a', 'Opened', { name: 'a2' }),
    recorded('c', 'Closed', { reason: 'done' }),
  ]);
  t.same(calls, ['Opened:a,b', 'Tagged:a,b,a', 'Opened:a', 'Closed:c']);
});

t.test('a batchTogether group with a handler gets its whole run in log order; a lone event goes to its type', async (t) => {
  const calls: string[] = [];
  const log = (name: string) => async (_trx: Knex.Transaction, events: ReadonlyArray<{ streamId: string; type: string }>) => {
    calls.push(`${name}:${events.map((event) => `${event.type}@${event.streamId}`).join(',')}`);
  };
  const definition = projection<TestEvent>({
    name: 'grouped',
    tables: [],
    batchTogether: [{ types: ['Opened', 'Tagged'], handler: log('group') }],
    handlers: { Opened: log('Opened'), Tagged: log('Tagged'), Closed: log('Closed') },
  });
  await definition.applyBatch?.(trx, [
    recorded('a', 'Opened', { name: 'a' }),
    recorded('b', 'Opened', { name: 'b' }),
    recorded('a', 'Tagged', { tag: 'x' }),
    recorded('c', 'Closed', { reason: 'done' }),
    recorded('d', 'Tagged', { tag: 'y' }),
    // `d` was tagged: opening it again must come after, so the run ends here.
    recorded('d', 'Opened', { name: 'd' }),
  ]);
  t.same(calls, ['group:Opened@a,Opened@b,Tagged@a', 'Closed:Closed@c', 'Tagged:Tagged@d', 'Opened:Opened@d']);
});

t.test('apply hands one event to its handler', async (t) => {
  const seen: string[] = [];
  const definition = projection<TestEvent>({
    name: 'single',
    tables: [],
    handlers: {
      Opened: each(async (_trx, event) => {
        seen.push(event.data.name);
      }),
      Tagged: each(async (_trx, event) => {
        seen.push(event.data.tag);
      }),
      Closed: each(async (_trx, event) => {
        seen.push(event.data.reason);
      }),
    },
  });
  await definition.apply(trx, recorded('a', 'Tagged', { tag: 'x' }));
  t.same(seen, ['x']);
});

t.test('a batchTogether group must name handled types, each once', async (t) => {
  const handlers = { Opened: each<Extract<TestEvent, { type: 'Opened' }>>(async () => {}), Tagged: each<Extract<TestEvent, { type: 'Tagged' }>>(async () => {}) };
  t.throws(
    () => projection<Extract<TestEvent, { type: 'Opened' | 'Tagged' }>>({ name: 'p', tables: [], handlers, batchTogether: [['Opened'], ['Opened', 'Tagged']] }),
    /Opened is in two batchTogether groups/,
  );
  t.throws(
    // @ts-expect-error Closed is not a type of this projection
    () => projection<Extract<TestEvent, { type: 'Opened' | 'Tagged' }>>({ name: 'p', tables: [], handlers, batchTogether: [['Closed']] }),
    /batchTogether names Closed, which it does not handle/,
  );
});

t.test('the type checker refuses a missing or an extra handler', async (t) => {
  const opened = each<Extract<TestEvent, { type: 'Opened' }>>(async () => {});
  const tagged = each<Extract<TestEvent, { type: 'Tagged' }>>(async () => {});
  // @ts-expect-error Closed has no handler
  const missing = projection<TestEvent>({ name: 'missing', tables: [], handlers: { Opened: opened, Tagged: tagged } });
  t.notOk(missing.eventTypes.includes('Closed'));
  const extra = projection<Extract<TestEvent, { type: 'Opened' }>>({
    name: 'extra',
    tables: [],
    // @ts-expect-error Tagged is not an event of this projection
    handlers: { Opened: opened, Tagged: tagged },
  });
  t.ok(extra.eventTypes.includes('Opened'));
});
