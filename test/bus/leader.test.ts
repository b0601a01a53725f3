import t from 'tap';
import { runAsLeader } from '../../src/bus/leader.js';
import type { Database } from '../../src/db/database.js';

t.test("a failed election's warning gives the error's message, no class name before it", async (t) => {
  const warnings: object[] = [];
  const log = { info: () => undefined, warn: (fields: object) => void warnings.push(fields) };
  let starts = 0;
  let failed!: () => void;
  const warned = new Promise<void>((resolve) => (failed = resolve));
  // On PGlite the caller leads at once, with no connection: the role's start is what fails here.
  const db = { kind: 'pglite' } as Database; // only `kind` is read before the role starts
  const leadership = runAsLeader(
    db,
    'relay',
    {
      start: async () => {
        starts += 1;
        failed();
        throw new TypeError('the relay could not read its checkpoint');
      },
      stop: async () => undefined,
    },
    { retryMs: 60_000, log },
  );
  await warned;
  await new Promise((resolve) => setImmediate(resolve));
  await leadership.stop();
  t.equal(starts, 1);
  t.same(warnings, [{ role: 'relay', error: 'the relay could not read its checkpoint' }]);
});
