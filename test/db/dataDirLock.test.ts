import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { acquireDataDirLock, announceDataDirUrl, DataDirLockedError, proveInstance, unreadableLockError, verifyInstanceProof } from '../../src/db/dataDirLock.js';
import { openDatabase } from '../../src/db/database.js';
import { pgliteTemplate, seedPgliteDir } from '../helpers/pglite.js';

function scratchDir(t: Test): string {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-lock-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return path.join(root, 'pglite');
}

/** The pid of a process that has exited: a lock naming it is stale. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(child.stdout);
}

t.test('the first opener holds the lock; a second is refused with the owner named; release frees it', async (t) => {
  const dir = scratchDir(t);
  const lock = acquireDataDirLock(dir, 'factlog serve');
  t.equal(lock.lockPath, `${dir}.lock`);
  const recorded = JSON.parse(readFileSync(lock.lockPath, 'utf8'));
  t.match(recorded, { pid: process.pid, hostname: hostname(), command: 'factlog serve' });

  t.throws(() => acquireDataDirLock(dir, 'factlog migrate'), DataDirLockedError, 'even from the same process');
  t.throws(() => acquireDataDirLock(dir), { message: `data directory ${dir} is in use by factlog serve (pid ${process.pid}): stop it first` });

  announceDataDirUrl('http://127.0.0.1:8080');
  t.equal(JSON.parse(readFileSync(lock.lockPath, 'utf8')).url, 'http://127.0.0.1:8080', 'the serving address is recorded');

  lock.release();
  t.notOk(existsSync(lock.lockPath), 'released');
  lock.release();
  acquireDataDirLock(dir).release();
});

t.test('a lock left by a process that is gone is taken over', async (t) => {
  const dir = scratchDir(t);
  const pid = deadPid();
  writeFileSync(`${dir}.lock`, JSON.stringify({ pid, hostname: hostname(), command: 'factlog serve', startedAt: '2026-01-01T00:00:00.000Z' }));
  const lock = acquireDataDirLock(dir);
  t.equal(JSON.parse(readFileSync(lock.lockPath, 'utf8')).pid, process.pid);
  t.notOk(existsSync(`${lock.lockPath}.takeover`), 'no takeover marker is left behind');
  lock.release();
});

t.test('a lock this process did not take, with its pid, is stale (the pid was reused)', async (t) => {
  const dir = scratchDir(t);
  writeFileSync(`${dir}.lock`, JSON.stringify({ pid: process.pid, hostname: hostname(), command: 'factlog serve', startedAt: '2026-01-01T00:00:00.000Z' }));
  const lock = acquireDataDirLock(dir);
  t.equal(JSON.parse(readFileSync(lock.lockPath, 'utf8')).startedAt === '2026-01-01T00:00:00.000Z', false);
  lock.release();
});

t.test('an unreadable lock is replaced; a lock from another host is respected', async (t) => {
  const dir = scratchDir(t);
  writeFileSync(`${dir}.lock`, 'not json');
  acquireDataDirLock(dir).release();

  writeFileSync(`${dir}.lock`, JSON.stringify({ pid: deadPid(), hostname: 'elsewhere.example', command: 'factlog serve', startedAt: '' }));
  t.throws(() => acquireDataDirLock(dir), { name: 'DataDirLockedError', message: /on elsewhere\.example.*if that host is gone, delete .*pglite\.lock/ });
});

t.test('a lock that cannot be read is said so, naming the lock file and what to do', async (t) => {
  const dir = scratchDir(t);
  const lockPath = `${dir}.lock`;
  mkdirSync(lockPath);
  t.throws(() => acquireDataDirLock(dir), { message: `cannot read the data directory's lock ${lockPath}: it is a directory; remove it` });
  rmSync(lockPath, { recursive: true });

  // Any other read error (here a symbolic link to itself, ELOOP) names the file and keeps the reason.
  symlinkSync(lockPath, lockPath);
  t.throws(() => acquireDataDirLock(dir), { message: new RegExp(`^cannot read the data directory's lock ${lockPath} \\(ELOOP: .*\\); remove it if no factlog uses the data directory$`) });

  // Permission denied cannot be made to happen for root (these tests' usual user): the error as Node gives it.
  const denied = Object.assign(new Error(`EACCES: permission denied, open '${lockPath}'`), { code: 'EACCES' });
  t.equal(unreadableLockError(lockPath, denied).message, `cannot read the data directory's lock ${lockPath}: permission denied; run factlog as the user that owns it, or remove it if no factlog uses the data directory`);
});

t.test('openDatabase holds the lock of a PGlite directory while open; in-memory databases take none', async (t) => {
  const dir = scratchDir(t);
  await seedPgliteDir(dir); // an initialised directory: the lock is the subject, not initdb (seconds of CPU)
  const db = await openDatabase({ kind: 'pglite', dataDir: dir });
  t.ok(existsSync(`${dir}.lock`));
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: dir }), DataDirLockedError);
  await db.close();
  t.notOk(existsSync(`${dir}.lock`), 'closing releases it');
  const again = await openDatabase({ kind: 'pglite', dataDir: dir });
  await again.close();

  const first = await openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
  const second = await openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
  await Promise.all([first.close(), second.close()]);
});

t.test('an open that fails after PGlite started closes it and releases the lock: the directory opens again', async (t) => {
  const dir = scratchDir(t);
  await seedPgliteDir(dir);
  // A real failure after the worker is up: in a read-only session the open's CREATE EXTENSION is refused.
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: dir, settings: { default_transaction_read_only: 'on' } }), /read-only transaction/);
  t.notOk(existsSync(`${dir}.lock`), 'the failed open released the lock');
  const again = await openDatabase({ kind: 'pglite', dataDir: dir });
  t.equal((await again.knex.raw('SELECT 1 AS one')).rows[0].one, 1, 'and the same process opens the directory again');
  await again.close();
});

t.test('a data directory that cannot be made or written is said so, naming the setting', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-lock-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const file = path.join(root, 'a-file');
  writeFileSync(file, 'not a directory');
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: path.join(file, 'pglite') }), {
    message: /^cannot use the data directory .*a-file\/pglite \(storage\.data_dir, STORAGE_DATA_DIR\): it must be a directory this process can create and write \(ENOTDIR/,
  });
  // The embedded database's own directory a file: said the same way, not as mkdir's EEXIST.
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: file }), {
    message: /^cannot use the data directory .*a-file \(storage\.data_dir, STORAGE_DATA_DIR\): it must be a directory this process can create and write \(ENOTDIR/,
  });
});

t.test('a data directory under a directory that refuses children (/proc) is said so, not looped on', { skip: !existsSync('/proc/self') && 'no /proc here' }, async (t) => {
  // Node's recursive mkdir looped forever here: mkdir('/proc/x') is ENOENT, mkdir('/proc') EEXIST.
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: '/proc/factlog-no-such/pglite' }), {
    message: /^cannot use the data directory \/proc\/factlog-no-such\/pglite \(storage\.data_dir, STORAGE_DATA_DIR\): it must be a directory this process can create and write \(ENOENT/,
  });
});

/** The boot id and start time /proc gives a pid, as a lock records them. */
function identityOf(pid: number): { bootId: string; processStartTicks: string } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return { bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(), processStartTicks: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] };
}

t.test('a lock whose live pid is another process now (a reboot, a reused pid) is taken over', { skip: !existsSync('/proc/sys/kernel/random/boot_id') && 'no /proc here' }, async (t) => {
  const dir = scratchDir(t);
  const lockPath = `${dir}.lock`;
  const owner = { pid: 1, hostname: hostname(), command: 'factlog serve', startedAt: '2026-01-01T00:00:00.000Z' };
  const pidOne = identityOf(1);

  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pidOne, processStartTicks: `${pidOne.processStartTicks}1` }));
  const reused = acquireDataDirLock(dir);
  const mine = JSON.parse(readFileSync(reused.lockPath, 'utf8'));
  t.equal(mine.pid, process.pid, 'pid 1 started at another time: reused');
  t.match(mine, identityOf(process.pid), 'a new lock records its identity');
  reused.release();

  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pidOne, bootId: 'another-boot' }));
  const afterReboot = acquireDataDirLock(dir);
  t.equal(JSON.parse(readFileSync(afterReboot.lockPath, 'utf8')).pid, process.pid, 'written before a reboot');
  afterReboot.release();

  writeFileSync(lockPath, JSON.stringify(owner));
  t.throws(() => acquireDataDirLock(dir), DataDirLockedError, 'an old lock without the identity trusts its live pid, as before');

  // A live owner with the identity it recorded keeps its lock.
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
  t.teardown(() => child.kill());
  writeFileSync(lockPath, JSON.stringify({ ...owner, pid: child.pid, ...identityOf(child.pid!) }));
  t.throws(() => acquireDataDirLock(dir), { name: 'DataDirLockedError', message: new RegExp(`pid ${child.pid}`) });
});

t.test("a lock records its run's instance key, for its user only, and only this run can prove it", async (t) => {
  const dir = scratchDir(t);
  const lock = acquireDataDirLock(dir, 'factlog serve');
  t.teardown(() => lock.release());
  announceDataDirUrl('http://127.0.0.1:8080');
  t.equal(statSync(lock.lockPath).mode & 0o777, 0o600, 'readable by its user only, also after the address is recorded');
  const owner = JSON.parse(readFileSync(lock.lockPath, 'utf8'));
  t.match(owner.instanceKey, /^[A-Za-z0-9_-]{43}$/);
  t.ok(verifyInstanceProof(owner, 'challenge-one', proveInstance('challenge-one')), 'the owner proves it');
  t.notOk(verifyInstanceProof(owner, 'challenge-two', proveInstance('challenge-one')), 'a proof answers its own challenge only');
  t.notOk(verifyInstanceProof({ ...owner, instanceKey: 'another run' }, 'challenge-one', proveInstance('challenge-one')), "another run's lock is not this one's");
  const { instanceKey: _none, ...older } = owner;
  t.notOk(verifyInstanceProof(older, 'challenge-one', proveInstance('challenge-one')), 'a lock without a key vouches for nobody');
});
