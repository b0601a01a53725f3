import { readFileSync } from 'node:fs';
import t from 'tap';
import { MCP_TOOL_NAMES, mcpTools } from '../../../src/mcp/tools/index.js';

/**
 * docs/mcp.md's tool table lists every tool tools/list answers, in its order, and names every
 * argument each tool's schema declares (`repository`, which every tool but two takes, is said
 * once above the table): a tool or an argument added in code without a word in the docs fails here.
 */
t.test('docs/mcp.md lists every tool with every argument its schema declares', async (t) => {
  const docs = readFileSync('docs/mcp.md', 'utf8');
  const rows = new Map<string, string>();
  for (const match of docs.matchAll(/^\| `(\w+)` \| ([^|]*) \|/gm)) if ((MCP_TOOL_NAMES as readonly string[]).includes(match[1]) || /^[a-z]+[A-Z]\w*$/.test(match[1])) rows.set(match[1], match[2]);
  t.same([...rows.keys()], [...MCP_TOOL_NAMES], 'one row per tool, in the order of tools/list');
  const problems: string[] = [];
  for (const tool of mcpTools) {
    const row = rows.get(tool.name) ?? '';
    const properties = Object.keys((tool.listing.inputSchema as { properties?: Record<string, unknown> }).properties ?? {});
    if (properties.length === 0 && row.trim() !== 'none') problems.push(`${tool.name}: takes no argument, the row says ${JSON.stringify(row.trim())}`);
    for (const property of properties) {
      if (property === 'repository') continue;
      if (!new RegExp(`\`${property}(\\[\\])?\``).test(row)) problems.push(`${tool.name}: ${property} is not in its row`);
    }
  }
  t.same(problems, [], `${mcpTools.length} tools checked`);
  t.match(docs, /Every tool but `getRepositories` and `listSearchProviders` takes `repository` \(required\)/, 'the repository argument is said once');
  const withoutRepository = mcpTools.filter((tool) => !Object.hasOwn((tool.listing.inputSchema as { properties?: object }).properties ?? {}, 'repository')).map((tool) => tool.name);
  t.same(withoutRepository, ['getRepositories', 'listSearchProviders'], 'and it is so');
});
