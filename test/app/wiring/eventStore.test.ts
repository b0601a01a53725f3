import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { openEventStore, pipelineEventStore } from '../../../src/app/wiring/eventStore.js';
import { buildConfig } from '../../../src/config/load.js';
import type { Databases } from '../../../src/app/wiring/databases.js';
import { EventSchemaRegistry } from '../../../src/eventstore/schemas.js';
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

// The first read said only gRPC's `14 UNAVAILABLE: No connection established. …`, naming neither
// EventStoreDB nor the setting (`factlog projections list`, `events tail`, and `serve` after it listened).
t.test('an EventStoreDB that cannot be reached is named with its setting when the store opens, its password left out', async (t) => {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const config = buildConfig({ eventstore: { backend: 'eventstoredb', eventstoredb: { connection_string: `esdb://admin:the-s3cret@127.0.0.1:${port}?tls=false` } } });
  const noDatabases: Databases = { open: () => Promise.reject(new Error('no database is opened for EventStoreDB')), close: async () => undefined };
  const schemas = await EventSchemaRegistry.load();
  const opening = openEventStore(config, schemas, noDatabases);
  await t.rejects(opening, {
    message: new RegExp(`^cannot use the EventStoreDB event store at 127\\.0\\.0\\.1:${port} \\(eventstore\\.eventstoredb\\.connection_string, EVENTSTORE_EVENTSTOREDB_CONNECTION_STRING; its password left out\\): .*UNAVAILABLE`),
  });
  await opening.catch((error: Error) => t.notMatch(error.message, /the-s3cret/, 'no password'));
  // `factlog migrate` does nothing on EventStoreDB, so it does not reach for it.
  const unreached = await openEventStore(config, schemas, noDatabases, { reach: false });
  await unreached.store.close();
});
