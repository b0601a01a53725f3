import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { buildCli, parsePosition } from '../src/cli.js';
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

t.test('--from takes decimal digits only, from 0 to 2^53 - 1, as the REST from', async (t) => {
  t.equal(parsePosition('0'), 0);
  t.equal(parsePosition('0012'), 12);
  t.equal(parsePosition('9007199254740991'), Number.MAX_SAFE_INTEGER);
  for (const value of ['', '0x10', '1e3', ' 5', '5 ', '+5', '5.0', '-3', 'Infinity', '9007199254740992']) {
    t.throws(() => parsePosition(value), { message: '--from must be an integer in decimal digits from 0 to 9007199254740991' }, `'${value}'`);
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
