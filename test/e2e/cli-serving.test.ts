import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import path from 'node:path';
import t from 'tap';
import { freePort, runCli, spawnServe, stopProcess, waitHealthy } from '../helpers/processes.js';
import { TEST_SECRET } from '../helpers/service.js';

/**
 * One owner per embedded data directory, with real processes: a second `serve` on the directory
 * of a running one refuses; CLI read commands ask the running service over HTTP (given a token)
 * and write commands refuse; after a SIGKILL the stale lock is taken over.
 */

// Several service and CLI processes, each starting tsx and PGlite: minutes on a busy machine.
t.setTimeout(600_000);

const env = { AUTH_JWTSECRET: TEST_SECRET, LOGGING_LEVEL: 'warn', BOOTSTRAP_DEFAULT_REPOSITORY: 'false' };

function serve(cwd: string, port: number) {
  const child = spawnServe({ cwd, port, env: { ...env, STORAGE_DATA_DIR: path.join(cwd, 'data') }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited, stderr: () => stderr };
}

t.test('a running service owns its data directory', async (t) => {
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-owner-'));
  const lockPath = path.join(cwd, 'data', 'pglite.lock');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let first = serve(cwd, port);
  t.teardown(async () => {
    await stopProcess(first.child);
    await rm(cwd, { recursive: true, force: true });
  });
  await waitHealthy(base, 300_000, first.child); // a generous bound: start-up takes minutes on a loaded machine
  const owner = JSON.parse(readFileSync(lockPath, 'utf8'));
  t.match(owner, { pid: first.child.pid, command: 'factlog serve', url: new RegExp(`:${port}$`) }, 'the lock names the service and its address');

  const registered = await fetch(`${base}/api/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'owner@example.org', password: 'correct horse battery', name: 'Owner' }),
  });
  t.equal(registered.status, 201, 'the first user becomes sysadmin');
  const token = ((await registered.json()) as { token: string }).token;

  const second = serve(cwd, await freePort());
  t.not(await second.exited, 0, 'a second serve on the same directory exits');
  t.match(second.stderr(), new RegExp(`data directory .*pglite is in use by factlog serve \\(pid ${first.child.pid}, http://[^)]*:${port}\\): stop it first`));
  t.equal(JSON.parse(readFileSync(lockPath, 'utf8')).pid, first.child.pid, 'and leaves the lock to its owner');

  const withoutToken = await runCli(cwd, ['projections', 'list']);
  t.equal(withoutToken.code, 1);
  t.match(withoutToken.stderr, /is in use by factlog serve .*or pass --token \(or FACTLOG_TOKEN\)/);

  const badToken = await runCli(cwd, ['--token', 'nonsense', 'projections', 'list']);
  t.equal(badToken.code, 1);
  t.match(badToken.stderr, /refused the token \(401: invalid token\): pass a current sysadmin's token/);

  const list = await runCli(cwd, ['projections', 'list'], { FACTLOG_TOKEN: token });
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, /^users\s+position\s+\d+\s+lag\s+\d+\s+running$/m, 'the live state of the running service');
  t.notMatch(list.stdout, /stopped/);

  const rebuild = await runCli(cwd, ['--token', token, 'projections', 'rebuild', 'users']);
  t.equal(rebuild.code, 0, rebuild.stderr);
  t.match(rebuild.stdout, /projection users is rebuilding in the service at http/);
  const unknown = await runCli(cwd, ['--token', token, 'projections', 'rebuild', 'nope']);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /unknown projection nope/);

  for (const command of [['migrate'], ['events', 'tail'], ['events', 'copy', '--to', 'postgres://127.0.0.1:1/none']]) {
    const refused = await runCli(cwd, command, { FACTLOG_TOKEN: token });
    t.equal(refused.code, 1, `${command.join(' ')} refuses`);
    t.match(refused.stderr, /is in use by factlog serve .*stop it first/, `${command.join(' ')} names the owner`);
  }

  // SIGKILL leaves the lock behind; the next opener finds its process gone and takes it over.
  await stopProcess(first.child, 'SIGKILL');
  t.ok(existsSync(lockPath), 'the killed service left its lock');
  const migrated = await runCli(cwd, ['migrate']);
  t.equal(migrated.code, 0, migrated.stderr);
  t.notOk(existsSync(lockPath), 'the CLI took the stale lock over and released it');

  first = serve(cwd, port);
  await waitHealthy(base, 300_000, first.child); // a generous bound: start-up takes minutes on a loaded machine
  t.equal(JSON.parse(readFileSync(lockPath, 'utf8')).pid, first.child.pid, 'a restarted service owns the directory again');
  t.same(await stopProcess(first.child), { code: 0, signal: null }, 'SIGTERM ends the service cleanly');
  t.notOk(existsSync(lockPath), 'a service stopped with SIGTERM removes its lock');
});

t.test('a port another process holds is said so, naming the settings, and the data directory is released', async (t) => {
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const port = (holder.address() as AddressInfo).port;
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-port-held-'));
  const refused = serve(cwd, port);
  t.teardown(async () => {
    await stopProcess(refused.child);
    holder.close();
    await rm(cwd, { recursive: true, force: true });
  });
  t.equal(await refused.exited, 1);
  t.equal(
    refused.stderr().trim(),
    `factlog: cannot listen on 127.0.0.1:${port} (server.host, server.port; SERVER_HOST, SERVER_PORT): another process listens on that port`,
    'one line, no stack',
  );
  t.notOk(existsSync(path.join(cwd, 'data', 'pglite.lock')), 'the lock released');
});

t.test('a node answers /healthz while it starts, holds other requests until started, and exits when starting fails', async (t) => {
  // A "broker" that accepts connections and never answers: joining the bus hangs until the node
  // gives up, as a Kafka group join can wait minutes for a rebalance after a member died.
  const sockets = new Set<Socket>();
  let connected!: () => void;
  const reached = new Promise<void>((resolve) => (connected = resolve));
  const broker = createServer((socket) => {
    sockets.add(socket);
    connected();
  });
  await new Promise<void>((resolve) => broker.listen(0, '127.0.0.1', resolve));
  const brokerPort = (broker.address() as AddressInfo).port;
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-starting-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = spawnServe({
    cwd,
    port,
    env: { ...env, STORAGE_DATA_DIR: path.join(cwd, 'data'), BUS_BACKEND: 'kafka', BUS_KAFKA_BROKERS: `127.0.0.1:${brokerPort}` },
    args: ['--role', 'worker'],
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  t.teardown(async () => {
    await stopProcess(child);
    for (const socket of sockets) socket.destroy();
    broker.close();
    await rm(cwd, { recursive: true, force: true });
  });

  await reached;
  await waitHealthy(base, 300_000); // a generous bound: start-up takes minutes on a loaded machine
  t.pass('/healthz answers while the node waits for the bus');
  let settled = false;
  const held = fetch(`${base}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'nobody@example.org', password: 'correct horse battery' }),
  }).then(
    (reply) => ((settled = true), reply.status),
    () => ((settled = true), 'no answer'),
  );
  // A /healthz answered after the request was sent: the request had its turn and still waits.
  t.equal((await fetch(`${base}/healthz`)).status, 200);
  t.notOk(settled, 'a request sent while starting waits for the start');

  // The broker goes away: starting fails, the held request is not served, and the node exits.
  for (const socket of sockets) socket.destroy();
  broker.close();
  t.not(await exited, 0, 'a node that cannot start exits with an error');
  t.not(await held, 200, 'the held request was not served by a node that never started');
  t.match(stderr, /kafka|broker|ECONNREFUSED|connect/i, 'and says why');
});

t.test('a default admin the sign-up rules refuse is a configuration error before the port opens', async (t) => {
  // The test holds the port: a serve that listened before checking would fail to bind it (exit 1, EADDRINUSE).
  const holder = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const port = (holder.address() as AddressInfo).port;
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-bad-admin-'));
  t.teardown(async () => {
    holder.close();
    await rm(cwd, { recursive: true, force: true });
  });
  const child = spawnServe({
    cwd,
    port,
    env: {
      ...env,
      STORAGE_DATA_DIR: path.join(cwd, 'data'),
      BOOTSTRAP_DEFAULT_ADMIN: 'true',
      SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL: 'root@example.org',
      SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: 'short',
      SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME: 'Root',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = await new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  t.equal(exited, 2, stderr);
  t.match(
    stderr,
    /^factlog: invalid configuration: .*bootstrap\.default_admin: the administrator of SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL, SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD, SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME is refused: password must be at least 8 characters$/m,
  );
  t.notMatch(stderr, /EADDRINUSE/, 'it never asked for the port');
  t.notMatch(stderr, /short/, 'the password is not echoed');
  t.notOk(existsSync(path.join(cwd, 'data', 'pglite.lock')), 'and released the data directory');
});
