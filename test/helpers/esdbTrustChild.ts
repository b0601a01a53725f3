// Run by test/config/tls.test.ts in a process of its own: grpc-js reads
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when it loads (set on some machines, and then it trusts that file
// alone), so the parent starts this without it. Asks an EventStoreDB address its head before and
// after trusting `tls.ca_file`, and prints what each ask came to as JSON.
import { buildConfig, trustConfiguredCertificates } from '../../src/config/index.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { createEventStoreDbStore } from '../../src/eventstore/eventstoredb.js';

const [connectionString, caFile] = process.argv.slice(2);
const schemas = await EventSchemaRegistry.load();
const ask = async (): Promise<string> => {
  const store = createEventStoreDbStore({ connectionString, schemas });
  try {
    return String(await store.headPosition());
  } catch (error) {
    return String(error);
  } finally {
    await store.close();
  }
};
const before = await ask();
trustConfiguredCertificates(buildConfig({ tls: { ca_file: caFile } }), process.cwd());
const after = await ask();
process.stdout.write(JSON.stringify({ before, after }));
