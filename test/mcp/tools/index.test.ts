import t from 'tap';
import type { McpTool } from '../../../src/mcp/tools/common.js';
import { inListedOrder, MCP_TOOL_NAMES, mcpTools } from '../../../src/mcp/tools/index.js';

const tool = (name: string): McpTool => ({ name, listing: { name, inputSchema: { type: 'object' } }, register() {} });

t.test('the tools come in the listed order, every defined one listed', async (t) => {
  t.same(mcpTools.map((defined) => defined.name), [...MCP_TOOL_NAMES]);
  t.same(inListedOrder(['b', 'a'], [tool('a'), tool('b')]).map((defined) => defined.name), ['b', 'a']);
});

t.test('a listed name without a tool, or a tool the list leaves out, fails at load', async (t) => {
  t.throws(() => inListedOrder(['a', 'b'], [tool('a')]), /MCP tool b is not defined/);
  t.throws(() => inListedOrder(['a'], [tool('a'), tool('forgotten')]), /MCP tools forgotten are defined but not in MCP_TOOL_NAMES/);
});
