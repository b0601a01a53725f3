import t from 'tap';
import { runAsLeader } from '../../src/bus/leader.js';
import { openDatabase } from '../../src/db/database.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';

const waitFor = async (check: () => boolean, timeoutMs = 5_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
};

t.test('one leader at a time on a PostgreSQL server; takeover when it stops', async (t) => {
  const { scratch: first, second } = await scratchPostgresWithSecondPool(t, 'factlog_leader', 2);
  const started: string[] = [];
  const role = (name: string) => ({ start: async () => void started.push(`${name}:start`), stop: async () => void started.push(`${name}:stop`) });
  const a = runAsLeader(first, 'relay', role('a'), { retryMs: 50 });
  await waitFor(() => a.isLeader());
  const b = runAsLeader(second, 'relay', role('b'), { retryMs: 50 });
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.notOk(b.isLeader(), 'the second node waits');
  t.same(started, ['a:start']);
  await a.stop();
  await waitFor(() => b.isLeader());
  t.same(started, ['a:start', 'a:stop', 'b:start'], 'the second node takes over');
  await b.stop();
});

t.test('on PGlite the only process leads', async (t) => {
  const db = await openDatabase({ kind: 'pglite', dataDir: 'memory://' });
  t.teardown(() => db.close());
  let running = false;
  const leadership = runAsLeader(db, 'relay', { start: async () => void (running = true), stop: async () => void (running = false) });
  await waitFor(() => running);
  await leadership.stop();
  t.notOk(running);
});
