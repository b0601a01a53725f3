// A process that runs initdbInChildProcess with the busy child (test/db/pgliteThread.test.ts):
// the test ends it with a signal while its child works.
import { initdbInChildProcess } from '../../src/db/pgliteThread.js';

const [dataDir] = process.argv.slice(2);
await initdbInChildProcess(dataDir as string, {}, { entry: new URL('./initdbBusyChild.ts', import.meta.url) });
