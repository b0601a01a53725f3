/**
 * Child process entry (forked by `initdbInChildProcess` in src/db/pgliteThread.ts): runs PGlite's
 * initdb for a new data directory, closes it and exits. initdb peaks at about 1 GB of RSS and
 * leaves memory behind in the process that ran it (its WebAssembly instance, freed only when
 * that isolate collects it); here all of it goes away with this process, so the service, which
 * then opens the initialised directory, never holds it.
 */
import { PGlite } from '@electric-sql/pglite';
import { INITDB_DONE } from './pgliteProtocol.js';

const [dataDir, settingsJson] = process.argv.slice(2);
if (!dataDir || !process.send) {
  console.error('pgliteInitdbChild: run by initdbInChildProcess (src/db/pgliteThread.ts) with a data directory');
  process.exit(2);
}
// The parent is gone (killed while it waited for us): stop instead of finishing alone.
process.on('disconnect', () => process.exit(1));

const settings = JSON.parse(settingsJson ?? '{}') as Record<string, string>;
try {
  const pglite = await PGlite.create(dataDir, {
    startParams: [...PGlite.defaultStartParams, ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`])],
  });
  await pglite.close();
  // Done once the parent knows; the parent kills a child whose exit then hangs (pgliteThread.ts).
  process.send(INITDB_DONE, () => process.exit(0));
} catch (error) {
  console.error('PGlite initdb failed:', error);
  process.exit(1);
}
