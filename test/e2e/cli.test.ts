import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import t from 'tap';
import { createAppContext } from '../../src/app/context.js';
import { buildConfig } from '../../src/config/load.js';
import { refusingPort } from '../helpers/ports.js';
import { runCli } from '../helpers/processes.js';
import { registerUser, startTestService, TEST_SECRET } from '../helpers/service.js';
import { openScratchPostgres } from '../../src/db/database.js';
import { createPostgresEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';

// A dozen CLI processes, each starting tsx and an embedded database: on a busy shared machine
// that is minutes, more than tap's default file timeout.
t.setTimeout(600_000);
const factlog = runCli;

t.test('migrate, projections list/rebuild, events tail, and bad input', async (t) => {
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-cli-'));
  t.teardown(() => rm(cwd, { recursive: true, force: true }));

  // Seed a log through the service itself: a starter repository and a user.
  const service = await startTestService({ dataDir: path.join(cwd, 'data'), overrides: { bootstrap: { default_repository: true } } });
  await registerUser(service, 'cli@example.org');
  await registerUser(service, 'second@example.org');
  await service.close({ keepData: true });

  const migrated = await factlog(cwd, ['migrate']);
  t.equal(migrated.code, 0, migrated.stderr);
  t.equal(migrated.stdout, 'the database is up to date: no migrations to apply\n', 'the service migrated it at start-up');

  // The starter repository (bootstrap.default_repository) is created by serve's start-up; create it via the list run.
  const list = await factlog(cwd, ['projections', 'list']);
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, /^repositories\s+position\s+\d+/m);
  t.match(list.stdout, /^facts\s+position/m);

  const rebuilt = await factlog(cwd, ['projections', 'rebuild', 'repositories']);
  t.equal(rebuilt.code, 0, rebuilt.stderr);
  t.match(rebuilt.stdout, /projection repositories rebuilt/);

  const unknown = await factlog(cwd, ['projections', 'rebuild', 'nope']);
  t.not(unknown.code, 0);
  t.match(unknown.stderr, /unknown projection nope/);

  const tail = await factlog(cwd, ['events', 'tail', '--from', '0']);
  t.equal(tail.code, 0, tail.stderr);
  const lines = tail.stdout.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line));
  t.ok(lines.length >= 3, `the seeded events are listed (${lines.length})`);
  t.ok(lines.every((event, i) => i === 0 || event.global_position > lines[i - 1].global_position), 'in log order');
  /** `factlog events tail` with `options` as a child whose output the test reads (runCli waits for the end; these are signalled or cut off). */
  const spawnTail = (options: string[], env: NodeJS.ProcessEnv = {}) =>
    spawn(process.execPath, [`--import=${import.meta.resolve('tsx')}`, path.join(import.meta.dirname, '../../src/main.ts'), 'events', 'tail', ...options], {
      cwd,
      env: { ...process.env, AUTH_JWTSECRET: TEST_SECRET, STORAGE_DATA_DIR: path.join(cwd, 'data'), LOGGING_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  const lockPath = path.join(cwd, 'data', 'pglite.lock');

  // Following the embedded log is refused before the data directory is opened: while the tail
  // held it nothing else could append (a running service makes the CLI refuse, and `serve`
  // cannot start), so it would wait forever for nothing.
  const embeddedFollow = await factlog(cwd, ['events', 'tail', '--follow']);
  t.equal(embeddedFollow.code, 1, 'following an embedded log is refused');
  t.match(embeddedFollow.stderr, /^factlog: events tail --follow cannot follow an embedded event log \(PGlite at .*pglite\): this command holds the data directory while it runs, .* poll GET \/api\/v1\/repositories\/\{id\}\/events, passing each reply's next_from as from; or follow a server-tier log/m);
  t.equal(embeddedFollow.stdout, '', 'having printed nothing');
  t.notOk(existsSync(lockPath), 'nor left a lock');

  // Ctrl-C while the tail still opens the database (seconds on an embedded one): the open ends,
  // nothing is printed, the lock is released and the exit is 0, as for a follow interrupted later.
  const opening = spawnTail([]);
  let openingOut = '';
  opening.stdout.on('data', (chunk: Buffer) => (openingOut += chunk.toString()));
  const openingExit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => opening.once('exit', (code, signal) => resolve({ code, signal })));
  for (let wait = 0; wait < 600 && !existsSync(lockPath); wait++) await new Promise((resolve) => setTimeout(resolve, 20));
  t.ok(existsSync(lockPath), 'the tail is opening the data directory');
  opening.kill('SIGINT');
  t.same(await openingExit, { code: 0, signal: null }, 'interrupted while opening, the tail exits 0');
  t.equal(openingOut, '', 'having printed nothing');
  t.notOk(existsSync(lockPath), 'and releases the lock');

  // `events tail | head -0`: the reader has closed the pipe before the first line; the tail ends quietly, exit 0, lock released.
  const piped = spawnTail([]);
  let pipedErr = '';
  piped.stderr.on('data', (chunk: Buffer) => (pipedErr += chunk.toString()));
  const pipedExit = new Promise<number | null>((resolve) => piped.once('exit', (code) => resolve(code)));
  piped.stdout.destroy();
  t.equal(await pipedExit, 0, `a closed pipe ends the tail with exit 0 (${pipedErr.trim()})`);
  t.notMatch(pipedErr, /EPIPE/, 'without a stack trace');
  t.notOk(existsSync(lockPath), 'the lock released');

  const tooFar = await factlog(cwd, ['events', 'tail', '--from', '1e20']);
  t.not(tooFar.code, 0);
  t.match(tooFar.stderr, /--from must be an integer in decimal digits from 0 to 9007199254740991/);

  // The log's warnings (here production's about bootstrap.auto_promote_first_user) go to stderr:
  // stdout stays the command's output, one event a line.
  const warned = await factlog(cwd, ['events', 'tail', '--from', '0'], { PROFILE: 'production', SVC_OAUTH_ISSUER: 'https://kg.example', AUTH_PASSWORD_HASH_COST: '15' });
  t.equal(warned.code, 0, warned.stderr);
  t.match(warned.stderr, /auto_promote_first_user is true in production/);
  t.same(warned.stdout.trim().split('\n').map((line) => JSON.parse(line).global_position), lines.map((event) => event.global_position), 'stdout holds only the events');

  // Copy the log into a PostgreSQL event store on the server; a second run copies nothing.
  const target = await openScratchPostgres(undefined, 'factlog_copy');
  t.teardown(() => target.close());
  const targetUrl = (target.knex.client.config.connection as { connectionString: string }).connectionString;
  const copied = await factlog(cwd, ['events', 'copy', '--to', targetUrl]);
  t.equal(copied.code, 0, copied.stderr);
  t.match(copied.stdout, new RegExp(`copied ${lines.length} events, skipped 0`));
  const copiedRows = await target.knex('events').orderBy('global_position').select('event_id', 'stream_id', 'stream_version', 'type');
  t.same(
    copiedRows.map((row) => [row.event_id, row.stream_id, row.stream_version, row.type]),
    lines.map((event) => [event.event_id, event.stream_id, event.stream_version, event.type]),
    'same events, ids, streams and versions',
  );
  const again = await factlog(cwd, ['events', 'copy', '--to', targetUrl]);
  t.match(again.stdout, new RegExp(`copied 0 events, skipped ${lines.length}`), 'copy is re-runnable');

  // A log on a PostgreSQL server is followed (eventstore.database names a server database; the
  // read models stay in the data directory, which the tail neither opens nor locks): the events
  // there, then one appended meanwhile; Ctrl-C ends it as a run ends, exit 0.
  const serverLog = { EVENTSTORE_DATABASE: 'events', DATABASES_EVENTS_URL: targetUrl };
  const following = spawnTail(['--follow'], serverLog);
  let followed = '';
  let followErr = '';
  following.stdout.on('data', (chunk: Buffer) => (followed += chunk.toString()));
  following.stderr.on('data', (chunk: Buffer) => (followErr += chunk.toString()));
  const stopped = new Promise<number | null>((resolve) => following.once('exit', (code) => resolve(code)));
  const followedEvents = () => followed.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { event_id: string; global_position: number });
  const waitForEvents = async (count: number) => {
    for (let wait = 0; wait < 600 && followedEvents().length < count && following.exitCode === null; wait++) await new Promise((resolve) => setTimeout(resolve, 100));
  };
  await waitForEvents(lines.length);
  t.same(followedEvents().map((event) => event.event_id), lines.map((event) => event.event_id), `the server log's events are printed (${followErr.trim()})`);
  t.notOk(existsSync(lockPath), "following a server log leaves the data directory's lock free");
  // What `factlog serve` does first: open the data directory, taking its lock, while the tail follows.
  const meanwhile = await createAppContext(buildConfig({ storage: { data_dir: path.join(cwd, 'data') }, auth: { jwt_secret: TEST_SECRET }, logging: { level: 'silent' } }), {
    workers: false,
    env: {},
    logger: pino({ level: 'silent' }),
    migrations: 'read-only',
  });
  t.ok(existsSync(lockPath), 'a context opens the data directory meanwhile');
  await meanwhile.close();
  const last = lines[lines.length - 1];
  const targetStore = createPostgresEventStore(target, { schemas: await EventSchemaRegistry.load() });
  const [appended] = (
    await targetStore.append(last.stream_id, [{ type: last.type, data: last.data, schemaVersion: last.schema_version, metadata: { repositoryId: last.repository_id, actor: last.actor, causationId: null, correlationId: null } }], 'any')
  ).events;
  await waitForEvents(lines.length + 1);
  t.equal(followedEvents().at(-1)?.event_id, appended.eventId, 'an event appended meanwhile is followed');
  following.kill('SIGINT');
  t.equal(await stopped, 0, 'an interrupted follow exits 0');
  t.equal(followedEvents().length, lines.length + 1, 'having printed the events');
  t.notOk(existsSync(lockPath), 'no lock left behind');
  await targetStore.close();

  // The read models' data directory is no part of a server log's tail: one that holds no database
  // (a deployment whose read models live elsewhere) is neither refused nor made.
  const noDataDir = path.join(cwd, 'no-data-here');
  const noReadModels = await factlog(cwd, ['events', 'tail'], { ...serverLog, STORAGE_DATA_DIR: noDataDir });
  t.equal(noReadModels.code, 0, noReadModels.stderr);
  t.equal(noReadModels.stdout.trim().split('\n').length, lines.length + 1, "the server log's events, printed");
  t.notOk(existsSync(noDataDir), 'and no data directory made');

  const badTarget = await factlog(cwd, ['events', 'copy', '--to', 'mysql://root:the-s3cret@db/x']);
  t.not(badTarget.code, 0);
  t.match(badTarget.stderr, /--to must be an esdb:\/\/, kurrentdb:\/\/ or postgres:\/\/ connection string, not a mysql:\/\/ one/);
  t.notMatch(badTarget.stderr, /the-s3cret/, 'a refused target is not repeated: it may hold a password');
  const closedPort = await refusingPort(t);
  const unreachable = await factlog(cwd, ['events', 'copy', '--to', `postgres://nobody:the-s3cret@127.0.0.1:${closedPort}/none?sslmode=disable`]);
  t.equal(unreachable.code, 1);
  t.match(
    unreachable.stderr,
    new RegExp(`^factlog: events copy: cannot open the PostgreSQL event store at 127\\.0\\.0\\.1:${closedPort}/none \\(--to, its password left out\\): connect ECONNREFUSED 127\\.0\\.0\\.1:${closedPort}; nothing was copied$`, 'm'),
    'the target named, what was tried, said once, in one line',
  );
  t.notMatch(unreachable.stderr, /the-s3cret/, 'the password left out');
  t.notMatch(unreachable.stderr, /Acquire connection error|\n\s+at /, 'no stack');

  const badFrom = await factlog(cwd, ['events', 'tail', '--from', '-3']);
  t.not(badFrom.code, 0);
  t.match(badFrom.stderr, /--from/);

  const badPort = await factlog(cwd, ['migrate'], { SERVER_PORT: 'eighty' });
  t.equal(badPort.code, 2);
  t.match(badPort.stderr, /server\.port/);

  await mkdir(path.join(cwd, 'prod'), { recursive: true });
  await writeFile(path.join(cwd, 'prod', 'config.yaml'), 'profile: production\nauth:\n  jwt_secret: CHANGE-ME-placeholder-jwt-secret-not-for-production\n');
  const production = await factlog(cwd, ['--config', path.join(cwd, 'prod'), 'migrate'], { AUTH_JWTSECRET: '' });
  t.not(production.code, 0, 'production refuses the placeholder secret');
  t.match(production.stderr, /jwt_secret/);

  // The operator command: a registered user becomes sysadmin, once; unknown users and other profiles are refused.
  const promoted = await factlog(cwd, ['users', 'promote', 'Second@Example.org']);
  t.equal(promoted.code, 0, promoted.stderr);
  t.match(promoted.stdout, /second@example\.org is now sysadmin/);
  const promotedAgain = await factlog(cwd, ['users', 'promote', 'second@example.org']);
  t.match(promotedAgain.stdout, /already is sysadmin/, 'idempotent');
  const grants = (await factlog(cwd, ['events', 'tail', '--from', '0'])).stdout.trim().split('\n').map((line) => JSON.parse(line));
  t.equal(grants.filter((event) => event.type === 'RoleGranted' && event.data.role === 'sysadmin' && event.actor === 'system:cli').length, 1, 'one RoleGranted, by system:cli');
  const nobody = await factlog(cwd, ['users', 'promote', 'nobody@example.org']);
  t.not(nobody.code, 0);
  t.match(nobody.stderr, /no user is registered with nobody@example\.org/);
  const elsewhere = await factlog(cwd, ['users', 'promote', 'second@example.org'], { PROFILE: 'production', SVC_OAUTH_ISSUER: 'https://kg.example', AUTH_PASSWORD_HASH_COST: '15' });
  t.not(elsewhere.code, 0);
  t.match(elsewhere.stderr, /embedded and dev profiles only/);
});
