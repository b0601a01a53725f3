import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import pino from 'pino';
import { createMcpServer } from '../../../src/mcp/server.js';
import type { ToolCall } from '../../../src/mcp/tools/common.js';
import type { Application } from '../../../src/app/application.js';
import type { Config } from '../../../src/config/types.js';
import type { PermissionAudit } from '../../../src/app/audit.js';
import type { IdempotencyStore } from '../../../src/app/idempotency.js';
import type { ReadModelRunner } from '../../../src/projection/types.js';
import { pageOf } from '../../../src/read/paging.js';

/** A repository list as the application layer pages it: at most 500 a page (pageOf), `total` of all. */
function repositoriesOf(count: number) {
  const all = Array.from({ length: count }, (_, i) => ({
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    name: `Repository ${i}`,
    slug: `repository-${i}`,
    tier: 'shared',
    description: '',
    roles: [],
  }));
  const asked: { limit: number; offset: number }[] = [];
  const list = async (_principal: unknown, input: { limit?: number; offset?: number } = {}) => {
    const page = pageOf(input, 100);
    asked.push(page);
    return { items: all.slice(page.offset, page.offset + page.limit), total: all.length };
  };
  return { list, asked };
}

async function getRepositories(app: Application) {
  const call: ToolCall = {
    app,
    context: { config: {} as Config, log: pino({ level: 'silent' }), audit: { record() {} } as unknown as PermissionAudit, projections: {} as ReadModelRunner, idempotency: {} as IdempotencyStore },
    principal: { userId: 'admin', credential: { kind: 'api_key', id: 'key' }, assignments: [{ role: 'sysadmin', domain: 'system' }] },
    trace: {},
  };
  const server = createMcpServer(call);
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(clientSide);
  const result = await client.callTool({ name: 'getRepositories', arguments: {} });
  await client.close();
  return result as { isError?: boolean; structuredContent?: { items: { id: string }[] } };
}

t.test('getRepositories lists every repository a sysadmin can read, past one page of the list', async (t) => {
  const { list, asked } = repositoriesOf(1201);
  const result = await getRepositories({ repositories: { list } } as unknown as Application);
  t.notOk(result.isError);
  const ids = result.structuredContent!.items.map((repository) => repository.id);
  t.equal(ids.length, 1201, 'all 1,201, not the first page of 500');
  t.equal(new Set(ids).size, 1201, 'each once');
  t.same(asked, [
    { limit: 500, offset: 0 },
    { limit: 500, offset: 500 },
    { limit: 500, offset: 1000 },
  ]);
});

t.test('getRepositories reads one page when one holds them all', async (t) => {
  for (const count of [0, 3, 500]) {
    const { list, asked } = repositoriesOf(count);
    const result = await getRepositories({ repositories: { list } } as unknown as Application);
    t.equal(result.structuredContent!.items.length, count);
    t.equal(asked.length, 1, `${count}: one page`);
  }
});
