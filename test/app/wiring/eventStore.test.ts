import t from 'tap';
import { pipelineEventStore } from '../../../src/app/wiring/eventStore.js';
import type { EventStore } from '../../../src/eventstore/port.js';
import { openMemoryPglite, openStore, thing } from '../../eventstore/contract.js';

t.test("the stages' store coalesces on one connection only", async (t) => {
  const fixture = await openStore(openMemoryPglite);
  t.teardown(fixture.close);
  let batches = 0;
  const counted: EventStore = {
    ...fixture.store,
    appendToStreams: (appends) => {
      batches += 1;
      return fixture.store.appendToStreams(appends);
    },
  };
  t.equal(pipelineEventStore({ store: counted, oneConnection: false }, counted), counted, 'a server: the store as it is');
  const coalescing = pipelineEventStore({ store: counted, oneConnection: true }, counted);
  await Promise.all(['a', 'b', 'c'].map((name) => coalescing.append(`thing-${name}`, [thing(name)], 'no_stream')));
  t.equal(batches, 1, 'PGlite: the appends that came while the first was out went as one multi-stream append');
  t.same((await fixture.store.readAll()).map((event) => event.streamId).sort(), ['thing-a', 'thing-b', 'thing-c']);
});
