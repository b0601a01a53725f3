import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SERVER_INFO } from './protocol.js';
import type { ToolCall } from './tools/common.js';
import { mcpTools } from './tools/index.js';

const INSTRUCTIONS =
  'Factlog is a knowledge graph of facts extracted from documents. Start with getRepositories; every other tool takes one of its ids or slugs ' +
  'as `repository`. Search facts with searchFacts and cite them by id; explore concepts with searchConcepts, getConcept and getRelatedConcepts; ' +
  'add documents with fetchAndProcessSource and poll getSourceTasks until `complete`.';

/**
 * The MCP server of one request. The SDK's stateless mode binds a server to one transport, so
 * each request gets its own; what is costly to build (the zod schemas, descriptions, the tool
 * list) is built once at module load in src/mcp/tools, and registering the twenty tools on a new
 * server costs about 0.1 ms (docs/mcp.md, "Cost of stateless mode").
 */
export function createMcpServer(call: ToolCall): McpServer {
  const server = new McpServer({ ...SERVER_INFO }, { capabilities: { tools: { listChanged: false } }, instructions: INSTRUCTIONS });
  for (const tool of mcpTools) tool.register(server, call);
  return server;
}
