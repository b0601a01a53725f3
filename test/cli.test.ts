import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import type { Command, CommanderError } from 'commander';
import t, { type Test } from 'tap';
import { buildCli, checkCopyTarget, parsePosition, parseServiceTimeout, projectionTable, refuseEmbeddedFollow } from '../src/cli.js';
import { loadConfig } from '../src/config/load.js';
import { acquireDataDirLock, nameRunningCommand } from '../src/db/dataDirLock.js';
import { migratedPgliteDir } from './helpers/olderSchema.js';
import { TEST_SECRET } from './helpers/service.js';

t.test("a data directory's lock names the command by its words, never an option's value", async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-cli-'));
  t.teardown(() => {
    nameRunningCommand(null);
    rmSync(root, { recursive: true, force: true });
  });
  const program = buildCli();
  let owner = '';
  // A stand-in for a command that opens the directory: what its lock records.
  program
    .command('probe')
    .command('deeper')
    .action(() => {
      const lock = acquireDataDirLock(path.join(root, 'pglite'));
      owner = JSON.parse(readFileSync(lock.lockPath, 'utf8')).command;
      lock.release();
    });
  await program.parseAsync(['--config', '/some/config/dir', 'probe', 'deeper'], { from: 'user' });
  t.equal(owner, 'factlog probe deeper');
});

t.test("a command's help lists the global options (--config) it accepts", async (t) => {
  const serve = buildCli().commands.find((command) => command.name() === 'serve')!;
  t.match(serve.helpInformation(), /Global Options:[\s\S]*-c, --config <path>/);
});

t.test('the help says what the commands do: --token serves both projections commands, the list shows the state', async (t) => {
  const help = (...names: string[]) => {
    let command = buildCli();
    for (const name of names) command = command.commands.find((sub) => sub.name() === name)!;
    // Unwrapped, so a phrase is matched whatever the terminal's width.
    return command.helpInformation().replace(/\s+/g, ' ');
  };
  t.match(help(), /--token <token> a sysadmin's access token: while a service owns the data directory, projections list and projections rebuild ask it over HTTP with it \(default: \$FACTLOG_TOKEN\)/);
  t.match(help('projections'), /list show each projection, its position, lag and state/);
});

t.test('--version prints the package\'s version; users promote refuses an empty email before opening anything', async (t) => {
  const version = (JSON.parse(readFileSync(path.resolve(import.meta.dirname, '../package.json'), 'utf8')) as { version: string }).version;
  let printed = '';
  const program = buildCli().exitOverride().configureOutput({ writeOut: (text) => (printed += text) });
  await t.rejects(program.parseAsync(['--version'], { from: 'user' }), { code: 'commander.version' });
  t.equal(printed.trim(), version);
  await t.rejects(buildCli().parseAsync(['users', 'promote', '  '], { from: 'user' }), { message: 'users promote: the email is empty' });
});

t.test("help names an unknown command as the command line does, exit 1, instead of printing the general help", async (t) => {
  /** What `factlog <args>` writes to stderr and the exit code commander asks for, its commands told to throw instead of exiting. */
  const run = async (...args: string[]) => {
    let errors = '';
    const program = buildCli();
    const quiet = (command: Command): void => {
      command.exitOverride().configureOutput({ writeErr: (text) => (errors += text), writeOut: () => {} });
      command.commands.forEach(quiet);
    };
    quiet(program);
    const failure = await program.parseAsync(args, { from: 'user' }).then(() => null, (error: CommanderError) => error);
    return { errors, exitCode: failure?.exitCode };
  };
  const direct = await run('nosuch');
  t.same(direct, { errors: "error: unknown command 'nosuch'\n", exitCode: 1 }, 'the command line');
  t.same(await run('help', 'nosuch'), direct, 'help of it says the same');
  t.same(await run('help', 'projections', 'nosuch'), direct, 'as does help of an unknown subcommand');
  t.same(await run('projections', 'help', 'nosuch'), direct, "and a command's own help");
  t.same(await run('help', 'projections'), { errors: '', exitCode: 0 }, 'a known command still has its help');
});

t.test('--from takes decimal digits only, from 0 to 2^53 - 1, as the REST from', async (t) => {
  t.equal(parsePosition('0'), 0);
  t.equal(parsePosition('0012'), 12);
  t.equal(parsePosition('9007199254740991'), Number.MAX_SAFE_INTEGER);
  for (const value of ['', '0x10', '1e3', ' 5', '5 ', '+5', '5.0', '-3', 'Infinity', '9007199254740992']) {
    t.throws(() => parsePosition(value), { message: '--from must be an integer in decimal digits from 0 to 9007199254740991' }, `'${value}'`);
  }
});

t.test('events copy --to: a scheme it copies to, and a PostgreSQL URL that names its database', async (t) => {
  t.throws(() => checkCopyTarget('mysql://root:the-s3cret@db/x'), { message: '--to must be an esdb://, kurrentdb:// or postgres:// connection string, not a mysql:// one' });
  // Without a path the driver copied into a database named after the user.
  for (const target of ['postgres://copier:the-s3cret@db:5432', 'postgresql://db:5432/?sslmode=require']) {
    t.throws(
      () => checkCopyTarget(target),
      { message: '--to names no database: put its name in the path, postgres://user:password@host:5432/<database>' },
      target.replace(/:the-s3cret/, ''),
    );
  }
  for (const target of ['postgres://copier:the-s3cret@db:5432/events', 'esdb://db:2113?tls=false', 'kurrentdb+discover://a:2113,b:2113']) {
    t.doesNotThrow(() => checkCopyTarget(target), target);
  }
});

t.test('migrate lists the migrations it applied, per schema, or says the database is up to date', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-cli-migrate-'));
  await migratedPgliteDir(path.join(root, 'pglite'), { older: true });
  const printed: string[] = [];
  const log = console.log;
  const env = { STORAGE_DATA_DIR: process.env.STORAGE_DATA_DIR, AUTH_JWTSECRET: process.env.AUTH_JWTSECRET, LOGGING_LEVEL: process.env.LOGGING_LEVEL };
  console.log = (line: string) => void printed.push(line);
  Object.assign(process.env, { STORAGE_DATA_DIR: root, AUTH_JWTSECRET: TEST_SECRET, LOGGING_LEVEL: 'warn' });
  t.teardown(() => {
    console.log = log;
    for (const [name, value] of Object.entries(env)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    nameRunningCommand(null);
    rmSync(root, { recursive: true, force: true });
  });
  await buildCli().parseAsync(['migrate'], { from: 'user' });
  await buildCli().parseAsync(['migrate'], { from: 'user' });
  t.same(printed, [
    'applied 2 migrations:\n  read models: 020_oauth_answered_requests\n  event store: events_planner_statistics',
    'the database is up to date: no migrations to apply',
  ]);
});

/** The identity /proc gives pid 1, which a lock must record for pid 1 to hold it (an old lock trusts its pid alone). */
function pid1Identity(): { bootId: string; processStartTicks: string } {
  const stat = readFileSync('/proc/1/stat', 'utf8');
  return { bootId: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(), processStartTicks: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] };
}

/**
 * A data directory whose lock names `factlog serve` (pid 1, alive) at the address of a stand-in
 * service: it records the authorizations it is sent, proves the lock's instance key when
 * `proving.key` is set, lists `proving.projections` (by default `users`, running; its rebuild is a
 * 409 as if already rebuilding) and rebuilds no other (a 404); with `proving.refusal` it refuses
 * every request with that status and message; with `proving.shuttingDown` it answers every request 503,
 * with `proving.silent` none (it takes the request and never answers, as a stuck service), with
 * `proving.silentProof` not even the proof.
 * STORAGE_DATA_DIR points at the directory and console.log's lines go to `printed` until the test ends.
 */
async function lockedByStandIn(t: Test) {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-cli-remote-'));
  mkdirSync(path.join(root, 'pglite'));
  writeFileSync(path.join(root, 'pglite', 'PG_VERSION'), '17\n'); // a database, as far as the CLI looks before opening
  const proving: { key: string | null; shuttingDown: boolean; silent: boolean; silentProof: boolean; refusal: { status: number; message: string } | null; projections: object[] } = {
    key: null,
    shuttingDown: false,
    silent: false,
    silentProof: false,
    refusal: null,
    projections: [{ name: 'users', position: 7, head: 7, lag: 0, state: 'running', last_error: null }],
  };
  const authorizations: string[] = [];
  const server = createServer((request, response) => {
    if (request.headers.authorization) authorizations.push(request.headers.authorization);
    const url = new URL(request.url ?? '/', 'http://x');
    response.setHeader('content-type', 'application/json');
    if (url.pathname === '/healthz/instance' && proving.silentProof) {
      // Taken and never answered, as by a stuck (or SIGSTOPped) service.
    } else if (url.pathname === '/healthz/instance') {
      const challenge = url.searchParams.get('challenge') ?? '';
      response.end(JSON.stringify({ proof: proving.key === null ? 'not-a-proof' : createHmac('sha256', proving.key).update(challenge).digest('base64url') }));
    } else if (proving.silent) {
      // Taken and never answered: the connection stays open until the test ends.
    } else if (proving.refusal !== null) {
      response.statusCode = proving.refusal.status;
      response.end(JSON.stringify({ error: proving.refusal.status === 401 ? 'unauthorized' : 'forbidden', message: proving.refusal.message }));
    } else if (proving.shuttingDown) {
      response.statusCode = 503;
      response.end(JSON.stringify({ error: 'unavailable', message: 'the service is shutting down; retry in a few seconds' }));
    } else if (request.method === 'POST' && url.pathname === '/api/v1/projections/users/rebuild') {
      response.statusCode = 409;
      response.end(JSON.stringify({ error: 'conflict', message: 'projection users is already rebuilding; follow it in GET /projections' }));
    } else if (request.method === 'POST') {
      response.statusCode = 404;
      response.end(JSON.stringify({ error: 'not_found', message: 'projection not found' }));
    } else response.end(JSON.stringify({ projections: proving.projections }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const printed: string[] = [];
  const log = console.log;
  const dataDir = process.env.STORAGE_DATA_DIR;
  console.log = (line: string) => void printed.push(line);
  process.env.STORAGE_DATA_DIR = root;
  t.teardown(() => {
    console.log = log;
    if (dataDir === undefined) delete process.env.STORAGE_DATA_DIR;
    else process.env.STORAGE_DATA_DIR = dataDir;
    nameRunningCommand(null);
    server.closeAllConnections();
    server.close();
    rmSync(root, { recursive: true, force: true });
  });
  const lockPath = path.join(root, 'pglite.lock');
  const owner = { pid: 1, hostname: hostname(), command: 'factlog serve', startedAt: '2026-01-01T00:00:00.000Z', url };
  return { url, lockPath, owner, proving, authorizations, printed };
}

t.test('a token goes only to a service that proves it holds the lock: never on an old lock, nor to a stranger at its address', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { url, lockPath, owner, proving, authorizations, printed } = await lockedByStandIn(t);
  const list = () => buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'list'], { from: 'user' });

  writeFileSync(lockPath, JSON.stringify(owner));
  await t.rejects(list(), {
    message: new RegExp(
      `is in use by factlog serve \\(pid 1, ${url}\\): stop it first; its lock was written by an older factlog and records no instance key, so nothing shows that the service at ${url} is the one holding it: no token was sent\\. .*if no factlog runs on .*, delete ${lockPath}$`,
    ),
  });

  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: 'the-key-of-the-run-that-wrote-the-lock' }));
  await t.rejects(list(), { message: new RegExp(`^the lock ${lockPath} names factlog serve \\(pid 1\\) at ${url}, but what answers there is not it \\(no proof of the lock's instance key\\): no token was sent\\. If no factlog runs`) });
  t.same(authorizations, [], 'the token went nowhere');

  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  await list();
  t.same(authorizations, ['Bearer the-sysadmin-token'], 'the proven owner is asked, with the token');
  t.match(printed, [/^users\s+position\s+7\s+lag\s+0\s+running$/]);
});

t.test("projections list shows why a failed projection stopped, on an indented line of its own under its row", async (t) => {
  const failed = { name: 'facts', position: 120, head: 125, lag: 5, state: 'failed', last_error: 'relation "facts" does not exist\nLINE 1: INSERT INTO facts' };
  const running = { name: 'users', position: 125, head: 125, lag: 0, state: 'running', last_error: null };
  const table = [
    'facts                position      120  lag        5  failed',
    '    error: relation "facts" does not exist',
    '           LINE 1: INSERT INTO facts',
    'users                position      125  lag        0  running',
  ];
  // Read here (the runner's status, as GET /api/v1/projections presents it) and from a service alike.
  t.same(projectionTable([failed, running]), table);
  t.same(projectionTable([{ name: 'users', position: 1, lag: 0, state: 'running' }]), ['users                position        1  lag        0  running'], "an older service's answer, without last_error");
  t.same(
    projectionTable([{ name: 'facts', position: 40, lag: 60, state: 'stopped', last_error: 'its rebuild stopped at position 40 of 100' }]),
    ['facts                position       40  lag       60  stopped', '    note:  its rebuild stopped at position 40 of 100'],
    'what a projection that has not failed says is a note, aligned as an error is',
  );

  t.test('asked of the running service', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
    const { lockPath, owner, proving, printed } = await lockedByStandIn(t);
    proving.key = 'the-key-of-the-run-that-wrote-the-lock';
    proving.projections = [failed, running];
    writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
    await buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'list'], { from: 'user' });
    t.same(printed, table);
  });
});

t.test("a rebuild the running service refuses is said in the CLI's words: the projections it has, or how to follow the rebuild underway", { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { url, lockPath, owner, proving } = await lockedByStandIn(t);
  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
  const rebuild = (name: string) => buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'rebuild', name], { from: 'user' });
  // As the offline rebuild says it.
  await t.rejects(rebuild('nope'), { message: 'unknown projection nope; known: users' });
  await t.rejects(rebuild('users'), { message: `projection users is already rebuilding in the service at ${url}; follow it with \`factlog projections list\`` });
  // Any other refusal: its status and the service's message, not the JSON it came in.
  proving.shuttingDown = true;
  await t.rejects(rebuild('users'), { message: `the service at ${url} answered 503: the service is shutting down; retry in a few seconds` });
  await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'list'], { from: 'user' }), {
    message: `the service at ${url} answered 503: the service is shutting down; retry in a few seconds`,
  });
});

t.test("a token the running service refuses is said with the service's reason: an expired or ended one is not said to lack the role", { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { url, lockPath, owner, proving } = await lockedByStandIn(t);
  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
  const remote = (...command: string[]) => buildCli().parseAsync(['--token', 'the-sysadmin-token', ...command], { from: 'user' });
  proving.refusal = { status: 401, message: 'token expired' };
  await t.rejects(remote('projections', 'list'), { message: `the service at ${url} refused the token (401: token expired): pass a current sysadmin's token (log in again for a new one)` });
  proving.refusal = { status: 401, message: 'session has ended' };
  await t.rejects(remote('projections', 'rebuild', 'users'), { message: `the service at ${url} refused the token (401: session has ended): pass a current sysadmin's token (log in again for a new one)` });
  proving.refusal = { status: 403, message: 'permission denied: projections:manage' };
  await t.rejects(remote('projections', 'rebuild', 'users'), { message: `the service at ${url} refused the token (403: permission denied: projections:manage): a sysadmin's token is needed` });
});

t.test('a token no HTTP header can carry is refused before anything is sent, and not printed', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { lockPath, owner, proving, authorizations } = await lockedByStandIn(t);
  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
  // Two tokens pasted with a line break between them; a quote a word processor curled.
  for (const token of ['the-sysadmin\nthe-other', 'the-sysadmin\u2019s']) {
    const refused = buildCli().parseAsync(['--token', token, 'projections', 'list'], { from: 'user' });
    await t.rejects(refused, {
      message: "--token (or FACTLOG_TOKEN) holds a character no token has (a space, a line break, a character outside ASCII): no token was sent; pass the token alone",
    }, JSON.stringify(token));
  }
  t.same(authorizations, [], 'nothing was sent');
  await buildCli().parseAsync(['--token', ' the-sysadmin-token\r\n', 'projections', 'list'], { from: 'user' });
  t.same(authorizations, ['Bearer the-sysadmin-token'], 'spaces and line ends around a token are dropped (a token file written on Windows)');
});

t.test('a service that holds the directory but does not listen yet is said to be starting, to be asked once it serves', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { lockPath, owner, authorizations } = await lockedByStandIn(t);
  const { url: _notYet, ...starting } = owner;
  writeFileSync(lockPath, JSON.stringify({ ...starting, ...pid1Identity(), instanceKey: 'the-key-of-the-run-that-wrote-the-lock' }));
  const dataDir = path.join(path.dirname(lockPath), 'pglite');
  const said = `data directory ${dataDir} is in use by factlog serve (pid 1), which is still starting (opening the database, migrating) and does not listen yet: retry once it serves to ask it over HTTP, or stop it first`;
  await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'list'], { from: 'user' }), { message: said });
  await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', 'projections', 'rebuild', 'users'], { from: 'user' }), { message: said });
  await t.rejects(buildCli().parseAsync(['projections', 'list'], { from: 'user' }), { message: `${said}; pass --token (or FACTLOG_TOKEN) with a sysadmin's token then` });
  t.same(authorizations, [], 'nothing was sent');
  // A command that needs the files is refused as before: a starting service is no reason to wait.
  await t.rejects(buildCli().parseAsync(['migrate'], { from: 'user' }), { message: `data directory ${dataDir} is in use by factlog serve (pid 1): stop it first` });
});

t.test('a stuck service that does not answer the proof either is waited for --service-timeout and said stuck, not a stranger whose lock may be deleted', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { url, lockPath, owner, proving, authorizations } = await lockedByStandIn(t);
  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  proving.silentProof = true;
  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
  await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', '--service-timeout', '0.2', 'projections', 'list'], { from: 'user' }), {
    message: `the service at ${url} did not answer GET /healthz/instance within 0.2 s (--service-timeout): it may be stuck; see its log, then retry, with a longer --service-timeout if it is only slow. No token was sent`,
  });
  t.same(authorizations, [], 'nothing was sent');
});

t.test('a running service that takes the request and never answers is waited for --service-timeout, then named with what to do', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
  const { url, lockPath, owner, proving } = await lockedByStandIn(t);
  proving.key = 'the-key-of-the-run-that-wrote-the-lock';
  proving.silent = true;
  writeFileSync(lockPath, JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key }));
  // 2 s, not less: the stand-in's proof must come back within the same bound on a busy machine.
  const remote = (...command: string[]) => buildCli().parseAsync(['--token', 'the-sysadmin-token', '--service-timeout', '2', ...command], { from: 'user' });
  const stuck = `^the service at ${url} did not answer`;
  const advice = `within 2 s \\(--service-timeout\\): it may still be starting \\(it holds requests until it has started\\) or be stuck; see its log and ${url}/healthz, then retry, with a longer --service-timeout if it is only slow`;
  await t.rejects(remote('projections', 'list'), { message: new RegExp(`${stuck} GET /api/v1/projections ${advice}$`) });
  await t.rejects(remote('projections', 'rebuild', 'facts'), {
    message: new RegExp(`${stuck} POST /api/v1/projections/facts/rebuild ${advice}\\. The request may have taken effect all the same: \`factlog projections list\` shows a rebuild under way$`),
  });
  // A bound finer than a millisecond is waited for as one, not refused by the timer with Node's words.
  await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', '--service-timeout', '0.0004', 'projections', 'list'], { from: 'user' }), {
    // The proof is bounded the same way, and a millisecond may end either request.
    message: new RegExp(`${stuck} GET \\S+ within 0\\.001 s \\(--service-timeout\\)`),
  });
});

t.test('events tail --follow is refused on an embedded event log, before anything is opened or asked, saying what to do instead', async (t) => {
  const settings = (env: NodeJS.ProcessEnv) => loadConfig({ env: { STORAGE_DATA_DIR: '/srv/factlog', AUTH_JWTSECRET: TEST_SECRET, ...env }, writeDefaults: false });
  const refusal = /^events tail --follow cannot follow an embedded event log \(PGlite at [^)]+\): this command holds the data directory while it runs, so nothing else can append to it and `factlog serve` cannot start\. While the service runs, poll GET \/api\/v1\/repositories\/\{id\}\/events, passing each reply's next_from as from; or follow a server-tier log/;
  t.throws(() => refuseEmbeddedFollow(settings({})), { message: refusal }, 'the default: the event store in the data directory');
  t.throws(() => refuseEmbeddedFollow(settings({})), { message: /\(PGlite at \/srv\/factlog\/pglite\)/ }, 'which is named');
  t.throws(() => refuseEmbeddedFollow(settings({ EVENTSTORE_DATABASE: 'events', DATABASES_EVENTS_URL: '' })), { message: /embedded event log \(PGlite at \/srv\/factlog\/pglite-events\)/ }, 'an embedded database of its own');
  t.doesNotThrow(() => refuseEmbeddedFollow(settings({ EVENTSTORE_DATABASE: 'events', DATABASES_EVENTS_URL: 'postgres://db/events' })), 'a PostgreSQL server log is followed');
  t.doesNotThrow(() => refuseEmbeddedFollow(settings({ EVENTSTORE_BACKEND: 'eventstoredb', EVENTSTORE_EVENTSTOREDB_CONNECTION_STRING: 'esdb://db:2113' })), 'an EventStoreDB log is followed');

  t.test('while a service owns the directory: refused, not asked nor locked', { skip: !existsSync('/proc/1/stat') && 'no /proc here' }, async (t) => {
    const { lockPath, owner, proving, authorizations, printed } = await lockedByStandIn(t);
    proving.key = 'the-key-of-the-run-that-wrote-the-lock';
    const lock = JSON.stringify({ ...owner, ...pid1Identity(), instanceKey: proving.key });
    writeFileSync(lockPath, lock);
    await t.rejects(buildCli().parseAsync(['--token', 'the-sysadmin-token', 'events', 'tail', '--follow'], { from: 'user' }), { message: refusal });
    t.same(authorizations, [], 'the service was not asked');
    t.same(printed, [], 'nothing printed');
    t.equal(readFileSync(lockPath, 'utf8'), lock, "the service's lock untouched");
  });
});

t.test('--service-timeout takes a number of seconds above 0, 30 unless given', async (t) => {
  t.equal(parseServiceTimeout('30'), 30_000);
  t.equal(parseServiceTimeout('0.5'), 500);
  // A timer takes whole milliseconds: a finer value failed every request with Node's own words (`The value of "delay" is out of range`).
  t.equal(parseServiceTimeout('1.005'), 1005, 'rounded to the millisecond');
  t.equal(parseServiceTimeout('2.0005'), 2001);
  t.equal(parseServiceTimeout('0.0001'), 1, 'at least one millisecond');
  for (const value of ['0', '', '-1', '1e3', 'ten', '86401', ' 5']) {
    t.throws(() => parseServiceTimeout(value), { message: '--service-timeout must be a number of seconds above 0 and at most 86400' }, `'${value}'`);
  }
  const program = buildCli();
  t.equal(program.opts().serviceTimeout, 30_000);
  t.match(program.helpInformation().replace(/\s+/g, ' '), /--service-timeout <seconds> how long projections list and projections rebuild wait for the running service to answer \(default: 30\)/);
});
