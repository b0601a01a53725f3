/**
 * What the MCP endpoint's stateless mode costs (docs/mcp.md, "Cost of stateless mode"): building
 * a server with every tool for each request, and whole requests over HTTP against a REST
 * request that reads the same data.
 *
 *   node --import=tsx --no-wasm-code-gc bench/mcp.ts      (BENCH_ROUNDS, default 300)
 */
import os from 'node:os';
import { createApplication } from '../src/app/application.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { createMcpServer } from '../src/mcp/server.js';
import { mcpTools } from '../src/mcp/tools/index.js';
import { registerUser, startTestService } from '../test/helpers/service.js';
import { accessToken, listen } from '../test/mcp/helpers.js';
import { envNumber, ms } from './common.js';

const rounds = envNumber('BENCH_ROUNDS', 300);

async function timePerRound(label: string, times: number, run: () => Promise<unknown>): Promise<void> {
  for (let warm = 0; warm < 20; warm++) await run();
  const started = performance.now();
  for (let round = 0; round < times; round++) await run();
  console.log(`| ${label} | ${ms((performance.now() - started) / times)} |`);
}

const service = await startTestService({ workers: false });
try {
  const user = await registerUser(service, 'bench@example.org');
  await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Bench' } });
  const { issuer, endpoint } = await listen(service);
  const token = await accessToken(service, issuer, user.user.id);
  const principal = { userId: user.user.id, credential: { kind: 'oauth' as const, id: 'bench' }, assignments: await service.context.identity.roleAssignments(user.user.id) };
  const call = { app: createApplication(service.context), context: service.context, principal, trace: {} };
  const post = (body: object) =>
    fetch(endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    }).then((response) => response.text());

  console.log(`Machine: ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(2)}; Node ${process.version}; ${rounds} rounds each.\n`);
  console.log('| measurement | per request |\n|---|---:|');
  await timePerRound(`build a server with the ${mcpTools.length} tools`, rounds * 10, async () => createMcpServer(call));
  await timePerRound('build, connect a stateless transport, close', rounds * 10, async () => {
    const server = createMcpServer(call);
    await server.connect(new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true }));
    await server.close();
  });
  await timePerRound('HTTP: REST GET /api/v1/repositories (session token)', rounds, () =>
    fetch(new URL('/api/v1/repositories', issuer), { headers: { authorization: `Bearer ${user.token}` } }).then((response) => response.text()),
  );
  await timePerRound('HTTP: MCP tools/call getRepositories', rounds, () => post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'getRepositories', arguments: {} } }));
  await timePerRound(`HTTP: MCP tools/list (${mcpTools.length} JSON schemas)`, rounds, () => post({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
} finally {
  await service.close();
}
