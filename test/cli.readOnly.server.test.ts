import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import knexFactory, { type Knex } from 'knex';
import t, { type Test } from 'tap';
import { JWT_SECRET_PLACEHOLDER } from '../src/config/types.js';
import { makeSchemaOlder } from './helpers/olderSchema.js';
import { freePort, runCli, spawnServe, stopProcess, waitHealthy } from './helpers/processes.js';
import { eventually } from './helpers/service.js';

/**
 * The reading commands on the server tier (`events tail`, `events copy`, `projections list`: the
 * ones that open an embedded data directory read-only) never write the PostgreSQL database:
 * no CREATE EXTENSION, no migration, no checkpoint rows, no advisory locks. They run as a role
 * that may only read (SELECT and USAGE, every transaction read-only), and every statement they
 * send is seen on the way (a proxy between the CLI and the server) and has to be a read.
 */

// `factlog serve` and a dozen CLI processes, each starting tsx: a minute or two.
t.setTimeout(600_000);

const BASE = process.env.FACTLOG_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;

function databaseUrl(database: string, { user, port }: { user?: string; port?: number } = {}): string {
  const url = new URL(BASE);
  url.pathname = `/${database}`;
  if (user !== undefined) {
    url.username = user;
    url.password = '';
  }
  if (port !== undefined) {
    url.hostname = '127.0.0.1';
    url.port = String(port);
  }
  return url.toString();
}

const admin = knexFactory({ client: 'pg', connection: BASE, pool: { min: 0, max: 1 } });
t.teardown(() => admin.destroy());

/** A new database on the server, dropped when `t` ends; its name. */
async function scratchDatabase(t: Test, name: string): Promise<string> {
  const database = `factlog_ro_${name}_${suffix}`;
  await admin.raw(`CREATE DATABASE "${database}"`);
  t.teardown(() => admin.raw(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`));
  return database;
}

/** A knex on `database` as the server's superuser (what the test looks and sets up with). */
function owner(t: Test, database: string): Knex {
  const knex = knexFactory({ client: 'pg', connection: databaseUrl(database), pool: { min: 0, max: 2 } });
  t.teardown(() => knex.destroy());
  return knex;
}

/**
 * A login role that may read `database` and nothing else: CONNECT, USAGE on `public`, SELECT on
 * its tables and sequences, every transaction read-only. Dropped when `t` ends (after the
 * database: its grants go with it).
 */
async function readerRole(t: Test, database: string, knex: Knex): Promise<string> {
  const role = `factlog_reader_${suffix}`;
  await admin.raw(`CREATE ROLE "${role}" LOGIN`);
  await admin.raw(`ALTER ROLE "${role}" SET default_transaction_read_only = on`);
  await admin.raw(`GRANT CONNECT ON DATABASE "${database}" TO "${role}"`);
  await knex.raw(`REVOKE CREATE ON SCHEMA public FROM PUBLIC`);
  await knex.raw(`GRANT USAGE ON SCHEMA public TO "${role}"`);
  await knex.raw(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${role}"`);
  await knex.raw(`GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO "${role}"`);
  t.teardown(async () => {
    await admin.raw(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.raw(`DROP ROLE IF EXISTS "${role}"`);
  });
  return role;
}

/**
 * A TCP proxy in front of the server that records the text of every statement its clients send
 * (simple queries and the parse step of extended ones), in order.
 */
async function statementRecorder(t: Test): Promise<{ port: number; statements: string[] }> {
  const upstream = new URL(BASE);
  const statements: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const server = connect(Number(upstream.port || 5432), upstream.hostname);
    sockets.add(client).add(server);
    let buffered = Buffer.alloc(0);
    let started = false;
    client.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        // The startup message has no type byte; every later one does.
        const header = started ? 5 : 4;
        if (buffered.length < header) break;
        const length = buffered.readInt32BE(started ? 1 : 0);
        const size = (started ? 1 : 0) + length;
        if (buffered.length < size) break;
        const type = started ? String.fromCharCode(buffered[0]) : '';
        const body = buffered.subarray(started ? 5 : 4, size);
        if (type === 'Q') statements.push(body.toString('utf8', 0, body.indexOf(0)));
        if (type === 'P') {
          const query = body.subarray(body.indexOf(0) + 1);
          statements.push(query.toString('utf8', 0, query.indexOf(0)));
        }
        started = true;
        buffered = buffered.subarray(size);
      }
      server.write(chunk);
    });
    server.on('data', (chunk) => client.write(chunk));
    const end = () => {
      client.destroy();
      server.destroy();
    };
    client.on('close', end).on('error', end);
    server.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { port: (server.address() as AddressInfo).port, statements };
}

/** The statements of `statements` that are no plain read: anything that creates, changes, locks or sets up. */
function writes(statements: readonly string[]): string[] {
  return statements.filter((sql) => /\b(create|insert|update|delete|alter|drop|truncate|grant|vacuum|analyze|pg_advisory\w*|nextval|setval)\b/i.test(sql) || /\bfor\s+(update|share)\b/i.test(sql));
}

/** Every relation of `public` and the rows of each table, with the installed extensions: equal only if nothing was written. */
async function databaseState(knex: Knex): Promise<Record<string, string>> {
  const state: Record<string, string> = {};
  const extensions = await knex.raw<{ rows: Array<{ extname: string }> }>(`SELECT extname FROM pg_extension ORDER BY extname`);
  state['extensions'] = extensions.rows.map((row) => row.extname).join(',');
  const relations = await knex.raw<{ rows: Array<{ relname: string; relkind: string }> }>(
    `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' ORDER BY c.relname`,
  );
  for (const relation of relations.rows) {
    if (relation.relkind !== 'r') {
      state[relation.relname] = relation.relkind;
      continue;
    }
    const rows = await knex.raw<{ rows: Array<{ n: number; digest: string | null }> }>(
      `SELECT count(*)::int AS n, md5(string_agg(t::text, '|' ORDER BY t::text)) AS digest FROM "${relation.relname}" AS t`,
    );
    state[relation.relname] = `${rows.rows[0].n} ${rows.rows[0].digest}`;
  }
  return state;
}

/** The CLI in `cwd` on the server database at `url` (the placeholder secret: the installation's kept one is read). */
function cliOn(cwd: string, url: string, args: string[]) {
  return runCli(cwd, args, { DATABASES_DEFAULT_URL: url, AUTH_JWTSECRET: JWT_SECRET_PLACEHOLDER });
}

async function workDir(t: Test): Promise<string> {
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-cli-read-only-'));
  t.teardown(() => rm(cwd, { recursive: true, force: true }));
  return cwd;
}

/** A new scratch database that `factlog migrate` migrated and nothing else touched, with a connection of its owner's. */
async function migratedDatabase(t: Test, cwd: string, name: string): Promise<{ database: string; knex: Knex }> {
  const database = await scratchDatabase(t, name);
  const migrated = await cliOn(cwd, databaseUrl(database), ['migrate']);
  t.equal(migrated.code, 0, migrated.stderr);
  t.match(migrated.stdout, /^applied \d+ migrations:/);
  return { database, knex: owner(t, database) };
}

/** Whether the server has pgvector to install. */
async function vectorAvailable(knex: Knex): Promise<boolean> {
  return (await knex.raw(`SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'vector'`)).rows[0].n > 0;
}

/** A new scratch database of a service that ran (`serve` migrated it, registered a user and projected the events; stopped), with a connection of its owner's. */
async function servedDatabase(t: Test, cwd: string, name: string): Promise<{ database: string; knex: Knex }> {
  const database = await scratchDatabase(t, name);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const serve = spawnServe({
    cwd,
    port,
    env: { DATABASES_DEFAULT_URL: databaseUrl(database), STORAGE_DATA_DIR: path.join(cwd, 'data'), AUTH_JWTSECRET: JWT_SECRET_PLACEHOLDER, LOGGING_LEVEL: 'warn', BOOTSTRAP_DEFAULT_REPOSITORY: 'false' },
  });
  t.teardown(() => stopProcess(serve));
  await waitHealthy(base, 300_000, serve);
  const registered = await fetch(`${base}/api/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'reader@example.org', password: 'correct horse battery', name: 'Reader' }),
  });
  t.equal(registered.status, 201, 'serve registers a user');
  t.equal((await stopProcess(serve)).code, 0, 'serve stops cleanly');
  const knex = owner(t, database);
  // The reading commands see the log as every reader does: up to the oldest transaction still
  // open anywhere on the server. serve's appends are committed, but another test's transaction in
  // another database may hide the last of them for a while, and the counts below take them all.
  await eventually(async () => {
    const { rows } = await knex.raw<{ rows: Array<{ hidden: number }> }>(`SELECT count(*)::int AS hidden FROM events WHERE transaction_id >= pg_snapshot_xmin(pg_current_snapshot())`);
    return rows[0].hidden === 0;
  }, 120_000);
  return { database, knex };
}

t.test('serve creates the vector extension (where the server has it) and migrates, as before', async (t) => {
  const cwd = await workDir(t);
  const { knex } = await servedDatabase(t, cwd, 'serve');
  const available = await vectorAvailable(knex);
  const installed = (await knex.raw(`SELECT count(*)::int AS n FROM pg_extension WHERE extname = 'vector'`)).rows[0].n > 0;
  t.equal(installed, available, available ? 'serve created the extension' : 'the server has no pgvector: nothing to create');
  t.ok((await knex('schema_migrations').count<Array<{ count: string }>>('* as count'))[0].count !== '0', 'the read-model migrations are recorded');
  t.ok((await knex('projection_checkpoints').select('name')).length > 0, 'the projections keep their checkpoints');
  t.equal((await knex('installation_secrets').select('name')).length, 1, 'the installation secret is kept');
});

t.test('the reading commands run as a role that may only read, send no write, and print what they should', async (t) => {
  const cwd = await workDir(t);
  const { database, knex } = await servedDatabase(t, cwd, 'read');
  const available = await vectorAvailable(knex);
  // Where the server has no pgvector, a view in front of the catalogue's says it has: a reader
  // that would install the extension is then seen trying, as it would be on a server with it.
  if (!available) await knex.raw(`CREATE VIEW public.pg_available_extensions AS SELECT 'vector'::name AS name, NULL::text AS installed_version`);
  const role = await readerRole(t, database, knex);
  if (!available) await admin.raw(`ALTER ROLE "${role}" SET search_path = public, pg_catalog`);
  const recorder = await statementRecorder(t);
  const reader = databaseUrl(database, { user: role, port: recorder.port });
  const target = await scratchDatabase(t, 'copy');
  const before = await databaseState(knex);
  const head = Number((await knex('events').max<Array<{ max: string }>>('global_position as max'))[0].max);
  t.ok(head > 0, 'the log holds events');

  const tail = await cliOn(cwd, reader, ['events', 'tail']);
  t.equal(tail.code, 0, `events tail: ${tail.stderr}`);
  const events = tail.stdout.trim().split('\n').map((line) => JSON.parse(line) as { type: string; globalPosition: number });
  t.equal(events.length, head, 'every event of the log');
  t.ok(events.some((event) => event.type === 'UserRegistered'), 'the user registered');

  const from = await cliOn(cwd, reader, ['events', 'tail', '--from', String(head - 1)]);
  t.equal(from.code, 0, from.stderr);
  t.equal(from.stdout.trim().split('\n').length, 1, '--from: the events after the position');

  const list = await cliOn(cwd, reader, ['projections', 'list']);
  t.equal(list.code, 0, `projections list: ${list.stderr}`);
  t.match(list.stdout, new RegExp(`^users\\s+position\\s+${head}\\s+lag\\s+0\\s+stopped$`, 'm'), 'the checkpoints serve kept');

  const copy = await cliOn(cwd, reader, ['events', 'copy', '--to', databaseUrl(target)]);
  t.equal(copy.code, 0, `events copy: ${copy.stderr}`);
  t.match(copy.stdout, `copied ${head} events, skipped 0 already present`);

  // Bad input is still said as such, with a non-zero exit.
  const missing = await cliOn(cwd, databaseUrl(`${database}_misspelt`, { user: role }), ['events', 'tail']);
  t.equal(missing.code, 1);
  // Named with where it was looked for and the setting that says so (the URL's password left out).
  t.match(missing.stderr, `factlog: cannot open the database default at ${new URL(databaseUrl(database)).host}/${database}_misspelt (databases.default.url, DATABASES_DEFAULT_URL): database "${database}_misspelt" does not exist`);
  const badFrom = await cliOn(cwd, reader, ['events', 'tail', '--from', '0x10']);
  t.not(badFrom.code, 0);
  t.match(badFrom.stderr, /--from must be an integer in decimal digits/);
  const badTarget = await cliOn(cwd, reader, ['events', 'copy', '--to', 'bogus://x']);
  t.equal(badTarget.code, 1);
  t.match(badTarget.stderr, /--to must be an esdb:\/\/, kurrentdb:\/\/ or postgres:\/\/ connection string/);

  t.ok(recorder.statements.length > 0, 'the proxy saw the statements');
  t.same(writes(recorder.statements), [], 'no statement but reads');
  t.same(await databaseState(knex), before, 'every table row for row, no relation or extension added');
});

t.test('a reading command with every right writes nothing either, on a database migrated but never served', async (t) => {
  const cwd = await workDir(t);
  const { database, knex } = await migratedDatabase(t, cwd, 'migrated');
  const before = await databaseState(knex);
  t.notOk('projection_checkpoints' in before, 'no projection ran: no checkpoints yet');
  const recorder = await statementRecorder(t);
  const url = databaseUrl(database, { port: recorder.port });

  const list = await cliOn(cwd, url, ['projections', 'list']);
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, /^users\s+position\s+0\s+lag\s+0\s+stopped$/m, 'no checkpoint: position 0');
  const tail = await cliOn(cwd, url, ['events', 'tail']);
  t.equal(tail.code, 0, tail.stderr);
  t.equal(tail.stdout, '', 'an empty log');

  t.same(writes(recorder.statements), [], 'no statement but reads');
  t.same(await databaseState(knex), before, 'no checkpoint table or row, no secret, nothing else');
});

t.test('a reading command on a database with pending migrations names them and applies none', async (t) => {
  const cwd = await workDir(t);
  const { database, knex } = await migratedDatabase(t, cwd, 'older');
  await makeSchemaOlder(knex);
  const role = await readerRole(t, database, knex);
  const before = await databaseState(knex);
  const recorder = await statementRecorder(t);
  for (const [user, label] of [[role, 'the reading role'], [undefined, 'the owner']] as const) {
    const url = databaseUrl(database, { user, port: recorder.port });
    for (const command of [['events', 'tail'], ['projections', 'list'], ['events', 'copy', '--to', 'postgres://postgres@127.0.0.1:1/none']]) {
      const refused = await cliOn(cwd, url, command);
      t.equal(refused.code, 1, `${label}: ${command.join(' ')} exits 1`);
      t.match(
        refused.stderr,
        /^factlog: the database is older than this factlog and needs migrations \(read models: 020_oauth_answered_requests; event store: events_planner_statistics\); this command does not migrate and wrote nothing/m,
        `${label}: ${command.join(' ')} names them`,
      );
    }
  }
  t.same(writes(recorder.statements), [], 'no statement but reads');
  t.same(await databaseState(knex), before, 'nothing applied, nothing written');
});
