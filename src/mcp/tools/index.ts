import { conceptTools } from './concepts.js';
import { factTools } from './facts.js';
import { investigationTools } from './investigations.js';
import { reportTools } from './reports.js';
import { repositoryTools } from './repositories.js';
import { sourceTools } from './sources.js';
import { taskTools } from './tasks.js';
import type { McpTool } from './common.js';

/** The order tools/list answers in: fixed, as 2026-07-28 asks (clients cache the list). */
export const MCP_TOOL_NAMES = [
  'getRepositories',
  'listSearchProviders',
  'searchSources',
  'searchFacts',
  'getFact',
  'getFactConcepts',
  'searchConcepts',
  'getConcept',
  'getConceptSummaries',
  'getRelatedConcepts',
  'getConceptRelation',
  'getConceptSources',
  'getInvestigation',
  'createInvestigation',
  'addInvestigationSource',
  'fetchAndProcessSource',
  'getSourceTasks',
  'createReport',
  'getReport',
  'listReports',
  'getReportTasks',
  'updateReport',
] as const;

const byName = new Map<string, McpTool>([...repositoryTools, ...sourceTools, ...factTools, ...conceptTools, ...investigationTools, ...taskTools, ...reportTools].map((tool) => [tool.name, tool]));

/** Every tool, in MCP_TOOL_NAMES order; a tool missing from a group file fails at load, not at a call. */
export const mcpTools: readonly McpTool[] = MCP_TOOL_NAMES.map((name) => {
  const tool = byName.get(name);
  if (!tool) throw new Error(`MCP tool ${name} is not defined`);
  return tool;
});
