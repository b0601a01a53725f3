import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { freePort, spawnServe, waitHealthy } from './processes.js';

t.test('waitHealthy fails as soon as the served process exits, with what it said on stderr', async (t) => {
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-processes-'));
  t.teardown(() => rm(cwd, { recursive: true, force: true }));
  const port = await freePort();
  // A configuration error: serve exits 2 before it opens anything.
  const serve = spawnServe({ cwd, port, env: { NETWORK_ALLOW_CIDRS: '["not-an-address"]', STORAGE_DATA_DIR: path.join(cwd, 'data') } });
  // The exit's message, not the bound's ('condition not met within …'): the wait ended with the process.
  await t.rejects(waitHealthy(`http://127.0.0.1:${port}`, 300_000, serve), {
    message: /^the service exited \(code 2, signal null\) before \/healthz answered 200; its stderr ended: factlog: invalid configuration: .*network\.allow_cidrs/,
  });
});
