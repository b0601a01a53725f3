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

/**
 * `tools` in the order of `names`. A name with no tool, or a tool no name lists, fails at load:
 * a tool added to a group file but not to the list would otherwise be left out of tools/list
 * without a word.
 */
export function inListedOrder(names: readonly string[], tools: readonly McpTool[]): McpTool[] {
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  const unlisted = tools.filter((tool) => !names.includes(tool.name)).map((tool) => tool.name);
  if (unlisted.length > 0) throw new Error(`MCP tools ${unlisted.join(', ')} are defined but not in MCP_TOOL_NAMES`);
  return names.map((name) => {
    const tool = byName.get(name);
    if (!tool) throw new Error(`MCP tool ${name} is not defined`);
    return tool;
  });
}

/** Every tool, in MCP_TOOL_NAMES order. */
export const mcpTools: readonly McpTool[] = inListedOrder(MCP_TOOL_NAMES, [
  ...repositoryTools,
  ...sourceTools,
  ...factTools,
  ...conceptTools,
  ...investigationTools,
  ...taskTools,
  ...reportTools,
]);
