import t, { type Test } from 'tap';
import type { Decider } from '../../src/domain/decider.js';
import { handleCommand } from '../../src/eventstore/commandHandler.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { metadata, openMemoryPglite, openStore, thing, withOverrides } from './contract.js';

/** The store's stream reads counted, over a real PGlite store. */
async function countedReads(t: Test) {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(fixture.close);
  const reads: string[] = [];
  const real: EventStore = fixture.store;
  const store = withOverrides(real, {
    readStream: (...args: Parameters<EventStore['readStream']>) => {
      reads.push(args[0]);
      return real.readStream(...args);
    },
  });
  return { store, reads };
}

type ThingEvent = { type: 'ThingHappened'; data: { name: string; count: number } };
/** Names a thing once: a named thing is not named again. */
const namer: Decider<{ names: string[] }, { name: string }, ThingEvent> = {
  initialState: () => ({ names: [] }),
  decide: (command, state) => (state.names.length > 0 ? [] : [{ type: 'ThingHappened', data: { name: command.name, count: 1 } }]),
  evolve: (state, event) => ({ names: [...state.names, event.data.name] }),
};

t.test('a new stream is decided on the initial state without a read', async (t) => {
  const { store, reads } = await countedReads(t);
  const result = await handleCommand(store, 'thing-new', namer, { name: 'a' }, metadata, { newStream: true });
  t.same(reads, [], 'no read');
  t.same(result.state, { names: ['a'] });
  t.equal(result.write?.streamVersion, 0);
  t.same((await store.readStream('thing-new')).map((event) => event.data.name), ['a'], 'appended');
});

t.test('a stream said to be new that exists is read and decided again after the append fails', async (t) => {
  const { store, reads } = await countedReads(t);
  await store.append('thing-old', [thing('first')], 'no_stream');
  const result = await handleCommand(store, 'thing-old', namer, { name: 'second' }, metadata, { newStream: true });
  t.same(reads, ['thing-old'], 'read once, for the retry');
  t.same(result.events, [], 'decided on the stream as it is: already named');
  t.same(result.state, { names: ['first'] });
  t.same((await store.readStream('thing-old')).map((event) => event.data.name), ['first'], 'nothing appended');
});

t.test('without newStream the stream is read first', async (t) => {
  const { store, reads } = await countedReads(t);
  const result = await handleCommand(store, 'thing-read', namer, { name: 'a' }, metadata);
  t.same(reads, ['thing-read']);
  t.same(result.state, { names: ['a'] });
});
