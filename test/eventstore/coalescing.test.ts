import t, { type Test } from 'tap';
import { coalescingEventStore } from '../../src/eventstore/coalescing.js';
import { ConcurrencyError, InvalidEventError, type EventStore } from '../../src/eventstore/port.js';
import { eventStorePortContract, openMemoryPglite, openStore, thing, withOverrides } from './contract.js';

// The decorator keeps every promise of the port (on PGlite, where it is used).
eventStorePortContract(t, {
  open: async (options) => {
    const fixture = await openStore(openMemoryPglite, options);
    return { store: coalescingEventStore(fixture.store), close: fixture.close };
  },
  eventIdScope: 'log',
});

/** The coalescing store over a real one whose calls are counted. */
async function countedStore(t: Test) {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(fixture.close);
  const calls = { append: 0, appendToStreams: [] as number[], readStream: 0, readStreams: [] as number[] };
  const real: EventStore = fixture.store;
  const counted = withOverrides(real, {
    append: (...args: Parameters<EventStore['append']>) => {
      calls.append += 1;
      return real.append(...args);
    },
    appendToStreams: (appends: Parameters<EventStore['appendToStreams']>[0]) => {
      calls.appendToStreams.push(appends.length);
      return real.appendToStreams(appends);
    },
    readStream: (...args: Parameters<EventStore['readStream']>) => {
      calls.readStream += 1;
      return real.readStream(...args);
    },
    readStreams: (...args: Parameters<EventStore['readStreams']>) => {
      calls.readStreams.push(args[0].length);
      return real.readStreams(...args);
    },
  });
  return { store: coalescingEventStore(counted), real, calls };
}

t.test('appends that come while one is out go as one multi-stream append; a version that does not hold fails only its caller', async (t) => {
  const { store, real, calls } = await countedStore(t);
  await real.append('thing-conflict', [thing('existing')], 'no_stream');
  const first = store.append('thing-first', [thing('first')], 'no_stream');
  const burst = [
    store.append('thing-a', [thing('a1'), thing('a2')], 'no_stream'),
    store.append('thing-conflict', [thing('late')], 'no_stream'),
    store.append('thing-b', [thing('b1')], 'any'),
  ];
  const [firstResult, a, conflict, b] = await Promise.allSettled([first, ...burst]);
  t.equal(calls.append, 1, 'the lone first call went as it was');
  t.same(calls.appendToStreams, [3], 'the three that came meanwhile went as one statement');
  t.equal(firstResult.status, 'fulfilled');
  t.match(a, { status: 'fulfilled', value: { nextExpectedVersion: 1, events: [{ streamId: 'thing-a', data: { name: 'a1' } }, { data: { name: 'a2' } }] } });
  t.match(b, { status: 'fulfilled', value: { nextExpectedVersion: 0 } });
  t.equal(conflict.status, 'rejected');
  t.ok(conflict.status === 'rejected' && conflict.reason instanceof ConcurrencyError, 'the conflicting caller gets the ConcurrencyError append throws');
  t.same((await real.readStream('thing-conflict')).map((event) => event.data.name), ['existing'], 'and nothing of it is stored');
  t.same((await real.readStream('thing-a')).map((event) => event.data.name), ['a1', 'a2']);
});

t.test('an invalid event fails only the caller that sent it', async (t) => {
  const { store, real, calls } = await countedStore(t);
  const first = store.append('thing-first', [thing('first')], 'no_stream');
  const good = store.append('thing-good', [thing('good')], 'no_stream');
  const bad = store.append('thing-bad', [{ type: 'ThingHappened', data: { name: 'bad', count: 'not a number' }, metadata: thing('x').metadata }], 'no_stream');
  const alsoGood = store.append('thing-also-good', [thing('also good')], 'no_stream');
  await first;
  await t.rejects(bad, InvalidEventError);
  t.match(await good, { nextExpectedVersion: 0 });
  t.match(await alsoGood, { nextExpectedVersion: 0 });
  t.same(calls.appendToStreams, [3], 'the batch was tried whole once');
  t.equal(calls.append, 4, 'then call by call');
  t.same((await real.readStream('thing-good')).length, 1);
  t.same(await real.readStream('thing-bad'), [], 'the invalid one stored nothing');
});

t.test('two appends to one stream in one burst go in turn, each at its version', async (t) => {
  const { store, real, calls } = await countedStore(t);
  const first = store.append('thing-first', [thing('first')], 'no_stream');
  const one = store.append('thing-s', [thing('one')], 'no_stream');
  const two = store.append('thing-s', [thing('two')], 0);
  const other = store.append('thing-t', [thing('other')], 'no_stream');
  await Promise.all([first, one, two, other]);
  t.same(calls.appendToStreams, [2], 'the first of the stream with the other stream');
  t.equal(calls.append, 2, 'the repeat alone in the next batch');
  t.same((await real.readStream('thing-s')).map((event) => event.data.name), ['one', 'two']);
});

t.test('whole-stream reads that come while one is out go as one read; reads from a version go as asked', async (t) => {
  const { store, real, calls } = await countedStore(t);
  await real.append('thing-x', [thing('x1'), thing('x2')], 'no_stream');
  await real.append('thing-y', [thing('y1')], 'no_stream');
  const first = store.readStream('thing-x');
  const burst = [store.readStream('thing-x'), store.readStream('thing-y'), store.readStream('thing-none'), store.readStream('thing-x')];
  const fromVersion = store.readStream('thing-x', { fromVersion: 1 });
  const [x0, x1, y, none, x2] = await Promise.all([first, ...burst]);
  t.same(calls.readStreams, [1, 3], 'the lone first read, then the three streams of four reads at once');
  t.equal(calls.readStream, 1, 'the read from a version went by itself');
  t.same((await fromVersion).map((event) => event.data.name), ['x2']);
  t.same(x0.map((event) => event.data.name), ['x1', 'x2']);
  t.same(y.map((event) => event.data.name), ['y1']);
  t.same(none, []);
  x1.pop();
  t.same(x2.map((event) => event.data.name), ['x1', 'x2'], 'callers of one stream each get their own list');
});

t.test('a batch stays short: at most 64 events an append, 64 streams a read', async (t) => {
  const { store, real, calls } = await countedStore(t);
  const first = store.append('thing-first', [thing('first')], 'no_stream');
  const burst = Array.from({ length: 100 }, (_, n) => store.append(`thing-${n}`, [thing(`${n}`)], 'no_stream'));
  await Promise.all([first, ...burst]);
  t.same(calls.appendToStreams, [64, 36], 'a hundred appends of one event: 64, then the rest');
  t.equal((await real.readAll({ limit: 1000 })).length, 101);
  const reading = store.readStream('thing-first');
  const reads = Array.from({ length: 100 }, (_, n) => store.readStream(`thing-${n}`));
  const streams = await Promise.all([reading, ...reads]);
  t.same(calls.readStreams, [1, 64, 36]);
  t.ok(streams.every((events) => events.length === 1), 'every reader its stream');
});
