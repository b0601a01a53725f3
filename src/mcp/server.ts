import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ListToolsRequestSchema, type ListToolsResult } from '@modelcontextprotocol/sdk/types.js';
import { SERVER_CAPABILITIES, SERVER_INFO } from './protocol.js';
import type { ToolCall } from './tools/common.js';
import { mcpTools } from './tools/index.js';

const INSTRUCTIONS =
  'Factlog is a knowledge graph of facts extracted from documents. Start with getRepositories; every other tool takes one of its ids or slugs ' +
  'as `repository`. Search facts with searchFacts and cite them by id; explore concepts with searchConcepts, getConcept and getRelatedConcepts, ' +
  'why two are related with getConceptRelation, and what a fact is about with getFactConcepts; ' +
  'add documents with fetchAndProcessSource and poll getSourceTasks until `complete`.';

/** The tools/list answer, built once: the SDK would convert twenty-two zod schemas to JSON Schema on every call (about 1.5 ms). */
export const TOOL_LIST: ListToolsResult = { tools: mcpTools.map((tool) => tool.listing) };

/**
 * The MCP server of one request. The SDK's stateless mode binds a server to one transport, so
 * each request gets its own; what is costly (the zod schemas, descriptions, the tool list) is
 * built once at module load, and a server with the twenty tools costs about 0.4 ms to build
 * (docs/mcp.md, "Cost of stateless mode"). `listFromSdk` keeps the SDK's own tools/list, for
 * the test that the cached list equals it.
 */
export function createMcpServer(call: ToolCall, options: { listFromSdk?: boolean } = {}): McpServer {
  const server = new McpServer({ ...SERVER_INFO }, { instructions: INSTRUCTIONS });
  for (const tool of mcpTools) tool.register(server, call);
  // After the tools: the SDK declares listChanged: true with its first tool, over what the constructor was given.
  server.server.registerCapabilities(SERVER_CAPABILITIES);
  // Replaces the handler McpServer installed with its first tool (a later registration would not re-install it).
  if (!options.listFromSdk) server.server.setRequestHandler(ListToolsRequestSchema, () => TOOL_LIST);
  return server;
}
