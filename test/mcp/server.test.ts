import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import pino from 'pino';
import { createMcpServer, TOOL_LIST } from '../../src/mcp/server.js';
import type { ToolCall } from '../../src/mcp/tools/common.js';
import type { Application } from '../../src/app/application.js';
import type { Config } from '../../src/config/types.js';
import type { PermissionAudit } from '../../src/app/audit.js';
import type { IdempotencyStore } from '../../src/app/idempotency.js';
import type { ReadModelRunner } from '../../src/projection/types.js';

// tools/list never reaches the application layer: these stand-ins are never called.
const call: ToolCall = {
  app: {} as Application,
  context: { config: {} as Config, log: pino({ level: 'silent' }), audit: {} as PermissionAudit, projections: {} as ReadModelRunner, idempotency: {} as IdempotencyStore },
  principal: { userId: 'u', credential: { kind: 'oauth', id: 'token' }, assignments: [] },
  trace: {},
};

async function listed(options: { listFromSdk?: boolean }) {
  const server = createMcpServer(call, options);
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(clientSide);
  const result = await client.listTools();
  await client.close();
  // As the wire carries it: JSON, where an undefined field is absent.
  return JSON.parse(JSON.stringify(result));
}

t.test('the tools/list built once equals what the SDK would list', async (t) => {
  const fromSdk = await listed({ listFromSdk: true });
  const cached = await listed({});
  t.equal(cached.tools.length, 22);
  t.same(cached, fromSdk);
  t.same(cached.tools, TOOL_LIST.tools);
});

t.test('initialize says the tool list does not change, as server/discover does', async (t) => {
  const server = createMcpServer(call);
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(clientSide);
  t.same(client.getServerCapabilities()?.tools, { listChanged: false });
  await client.close();
});
