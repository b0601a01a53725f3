import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { directoryState, migratedPgliteDir } from '../helpers/olderSchema.js';
import { freePort, runCli } from '../helpers/processes.js';

// CLI commands that must refuse before opening (or creating) anything: one line on stderr, no
// stack, and the stated exit code. Each case is one CLI process under tsx (seconds).
t.setTimeout(600_000);

/** A fresh working directory whose `data` the CLI is pointed at (runCli sets STORAGE_DATA_DIR). */
async function scratch(t: Test): Promise<string> {
  const cwd = await mkdtemp(path.join(tmpdir(), 'factlog-cli-refusals-'));
  t.teardown(() => rm(cwd, { recursive: true, force: true }));
  return cwd;
}

/** The one line a refusal prints, asserted to be the only output and stack-free. */
function assertOneLine(t: Test, stderr: string): void {
  t.equal(stderr.trim().split('\n').length, 1, `one line: ${stderr}`);
  t.notMatch(stderr, /\n\s+at /, 'no stack');
}

t.test('users promote on a profile that refuses it says so before opening the database', async (t) => {
  const cwd = await scratch(t);
  const unreachable = `postgres://nobody:x@127.0.0.1:${await freePort()}/none`;
  const refused = await runCli(cwd, ['users', 'promote', 'someone@example.org'], { PROFILE: 'distributed', DATABASES_DEFAULT_URL: unreachable });
  t.equal(refused.code, 1);
  t.match(refused.stderr, /^factlog: users promote runs on the embedded and dev profiles only \(this is distributed\); grant roles with PUT \/api\/v1\/admin\/users\/roles$/m);
  assertOneLine(t, refused.stderr);
});

t.test('events tail --from takes decimal digits only, as the REST API (each spelling: test/cli.test.ts)', async (t) => {
  const cwd = await scratch(t);
  const refused = await runCli(cwd, ['events', 'tail', '--from', '0x10']);
  t.not(refused.code, 0);
  t.match(refused.stderr, /--from must be an integer in decimal digits from 0 to 9007199254740991/);
});

t.test('commands that read a data directory refuse one that holds no database, and create nothing', async (t) => {
  const cwd = await scratch(t);
  const dataDir = path.join(cwd, 'data');
  // The check is withContext's, which every such command goes through (events copy, projections
  // list and users promote too): a reading command and the offline rebuild stand for them.
  const commands = [
    ['events', 'tail'],
    ['projections', 'rebuild', 'facts'],
  ];
  for (const command of commands) {
    const refused = await runCli(cwd, command);
    t.equal(refused.code, 1, command.join(' '));
    t.match(refused.stderr, `factlog: the data directory ${dataDir} (storage.data_dir, STORAGE_DATA_DIR) holds no database`, command.join(' '));
    assertOneLine(t, refused.stderr);
    t.notOk(existsSync(dataDir), `${command.join(' ')} created nothing`);
  }
});

t.test('a reading command refuses a database with pending migrations, naming them, and writes nothing (each mode: test/app/context.test.ts)', async (t) => {
  const cwd = await scratch(t);
  const pglite = path.join(cwd, 'data', 'pglite');
  await migratedPgliteDir(pglite, { older: true });
  const before = directoryState(pglite);
  const refused = await runCli(cwd, ['events', 'tail']);
  t.equal(refused.code, 1);
  t.match(
    refused.stderr,
    /^factlog: the database is older than this factlog and needs migrations \(read models: 020_oauth_answered_requests; event store: events_planner_statistics\); this command does not migrate and wrote nothing: back the database up \(embedded: the whole data directory, with the service stopped\), then run `factlog migrate` \(or start the service, which migrates\), and run the command again$/m,
  );
  assertOneLine(t, refused.stderr);
  t.same(directoryState(pglite), before, 'the database untouched, byte for byte');
  t.same(readdirSync(path.join(cwd, 'data')), ['pglite'], 'and its lock released');
});

t.test('a server database that cannot be reached is named with its setting, its password left out', async (t) => {
  const cwd = await scratch(t);
  const port = await freePort();
  const refused = await runCli(cwd, ['events', 'tail'], { DATABASES_DEFAULT_URL: `postgres://reader:the-password@127.0.0.1:${port}/factlog` });
  t.equal(refused.code, 1);
  t.match(refused.stderr, new RegExp(`^factlog: cannot open the database default at 127\\.0\\.0\\.1:${port}/factlog \\(databases\\.default\\.url, DATABASES_DEFAULT_URL\\): connect ECONNREFUSED`, 'm'));
  assertOneLine(t, refused.stderr);
  t.notMatch(refused.stderr, /the-password/);
});

t.test('a bad network.allow_cidrs entry is a configuration error (exit 2), before anything opens', async (t) => {
  const cwd = await scratch(t);
  const refused = await runCli(cwd, ['migrate'], { NETWORK_ALLOW_CIDRS: '999.1.1.1/99' });
  t.equal(refused.code, 2);
  t.match(refused.stderr, /^factlog: invalid configuration: .*network\.allow_cidrs\[0\]: must be an IP address or a CIDR range .*\(set by environment variable NETWORK_ALLOW_CIDRS\)/m);
  t.notMatch(refused.stderr, /999\.1\.1\.1/, 'the value is not echoed');
  t.notOk(existsSync(path.join(cwd, 'data')), 'nothing created');
});

t.test('an embedding dimension no search tier stores is a configuration error (exit 2) naming the key and the limit, before anything opens', async (t) => {
  const cwd = await scratch(t);
  const embeddings = { PROVIDERS_EMBEDDINGS_PROVIDER: 'openai', PROVIDERS_EMBEDDINGS_BASE_URL: 'http://127.0.0.1:9/v1', PROVIDERS_EMBEDDINGS_MODEL: 'text-embedding-3-large' };
  // It failed after opening the database, with exit 1 and a RangeError naming no key.
  const refused = await runCli(cwd, ['serve'], { ...embeddings, PROVIDERS_EMBEDDINGS_DIMENSIONS: '20000', SERVER_PORT: String(await freePort()) });
  t.equal(refused.code, 2);
  t.match(refused.stderr, /^factlog: invalid configuration: providers\.embeddings\.dimensions: must be at most 16000 .*got 20000 \(set by environment variable PROVIDERS_EMBEDDINGS_DIMENSIONS\)$/m);
  assertOneLine(t, refused.stderr);
  t.notOk(existsSync(path.join(cwd, 'data')), 'nothing created');
});
