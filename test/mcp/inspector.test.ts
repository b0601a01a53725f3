import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';
import { listen } from './helpers.js';

// The MCP Inspector's CLI mode (@modelcontextprotocol/inspector-cli), another client than the SDK's own, run as its own process.
const inspectorCli = path.join(path.dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/inspector-cli/package.json')), 'build', 'index.js');
const execute = promisify(execFile);
// The CLI looks for its package.json relative to the working directory: run it from its build folder.
const run = (file: string, args: string[], options: { timeout: number }) => execute(file, args, { ...options, cwd: path.dirname(inspectorCli) });

let service: TestService;
let endpoint: URL;
let token: string;
let repoId: string;

const inspect = async (...args: string[]) => {
  const { stdout } = await run(process.execPath, [inspectorCli, endpoint.href, '--transport', 'http', '--header', `Authorization: Bearer ${token}`, ...args], { timeout: 60_000 });
  return JSON.parse(stdout);
};

t.before(async () => {
  service = await startTestService({ workers: false });
  const user = await registerUser(service, 'inspector@example.org');
  repoId = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Inspected' } })).body.id;
  const listening = await listen(service);
  endpoint = listening.endpoint;
  // A personal API key, as a script or a desktop client configured by hand would send it.
  const key = await service.call('POST', '/api/v1/users/me/api-keys', { token: user.token, body: { name: 'inspector', scopes: ['*:read'] } });
  token = key.body.key;
});
t.teardown(() => service.close());

t.test('the MCP Inspector CLI lists the tools and calls one with an API key', async (t) => {
  const listed = await inspect('--method', 'tools/list');
  t.equal(listed.tools.length, 22);
  t.ok(listed.tools.some((tool: { name: string }) => tool.name === 'searchFacts'));
  const called = await inspect('--method', 'tools/call', '--tool-name', 'getRepositories');
  t.notOk(called.isError);
  t.match(JSON.parse(called.content[0].text), [{ id: repoId, name: 'Inspected', roles: ['owner'] }]);
});

t.test('the Inspector CLI without a token fails (401 with a challenge)', async (t) => {
  const failed = await run(process.execPath, [inspectorCli, endpoint.href, '--transport', 'http', '--method', 'tools/list'], { timeout: 60_000 }).then(
    () => null,
    (error: { code?: number; stderr?: string }) => error,
  );
  t.ok(failed, 'the CLI exits with an error');
  t.not(failed?.code, 0);
  t.match(failed?.stderr, /401|unauthorized/i, 'because of the 401');
});
