import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { connectionLocation, openDatabase } from '../../src/db/database.js';
import { seedPgliteDir } from '../helpers/pglite.js';
import { refusingPort } from '../helpers/ports.js';

t.test('a server open that cannot connect rejects and leaves no pool behind', async (t) => {
  const port = await refusingPort(t);
  // A pool left open keeps its timers (tarn's reaping interval); sockets and servers being closed
  // leave the list on a later turn of the loop, so only the timers are compared.
  const timers = () => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length;
  const before = timers();
  for (const readOnly of [false, true]) {
    await t.rejects(openDatabase({ kind: 'postgres', url: `postgres://postgres@127.0.0.1:${port}/postgres`, maxConns: 2, readOnly }), { code: 'ECONNREFUSED' });
  }
  t.equal(timers(), before, 'nothing left running: the failed opens destroyed their pools');
});

t.test('a connection string is named by its hosts and path, its user, password and options left out', async (t) => {
  t.equal(connectionLocation('postgres://factlog:the-s3cret@db:5432/factlog?sslmode=require'), 'db:5432/factlog');
  t.equal(connectionLocation('postgresql://db/factlog'), 'db/factlog');
  t.equal(connectionLocation('postgres://user:p@ss@db:5432/factlog'), 'db:5432/factlog', 'a password holding an @');
  // These printed `admin:s3cr`, `admin:se` and the whole `admin:chan/geit@127.0.0.1:1` (`events copy --to`'s refusal).
  t.equal(connectionLocation('postgres://admin:s3cr#et@db:5432/factlog'), 'db:5432/factlog', 'a password holding a #');
  t.equal(connectionLocation('postgres://admin:se?cret@db:5432/factlog'), 'db:5432/factlog', 'a password holding a ?');
  t.equal(connectionLocation('esdb://admin:chan/geit@127.0.0.1:1'), '127.0.0.1:1', 'a password holding a /');
  t.equal(connectionLocation('esdb://admin:changeit@node1:2113,node2:2113?tls=false'), 'node1:2113,node2:2113', 'several hosts, as written');
  t.equal(connectionLocation('kurrentdb+discover://cluster.local:2113'), 'cluster.local:2113');
  t.equal(connectionLocation('not a url'), undefined);
  t.equal(connectionLocation('postgres://user:pw@/factlog'), undefined, 'no host');
});

// PGlite said only `PGlite failed to initialize properly`, naming neither the directory nor a cause.
t.test('an embedded database that does not open is named, with its PostgreSQL version and what to do, and its lock released', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-unopenable-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = path.join(parent, 'pglite');
  await seedPgliteDir(dataDir);
  // As a release whose PGlite is another PostgreSQL version would have left it.
  writeFileSync(path.join(dataDir, 'PG_VERSION'), '99\n');
  await t.rejects(openDatabase({ kind: 'pglite', dataDir }), {
    message: new RegExp(
      `^cannot open the embedded database in ${dataDir} \\(storage\\.data_dir, STORAGE_DATA_DIR\\): .+; it holds a PostgreSQL 99 database\\. It may be damaged .*restore a backup made with this release, or run the release that made it$`,
    ),
  });
  t.notOk(existsSync(`${dataDir}.lock`), 'the lock is released');
});
