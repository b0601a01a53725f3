import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import t from 'tap';
import { buildCli } from '../src/cli.js';

/**
 * Every command that runs something (not a group), with its full name: `projections rebuild`.
 * The `help` commands (src/cli.ts puts its own in place of commander's on each level) are the
 * CLI's, not a command of the service to document.
 */
function leafCommands(command: Command, prefix: string[] = []): Array<{ name: string; command: Command }> {
  return command.commands.filter((sub) => sub.name() !== 'help').flatMap((sub) => {
    const path = [...prefix, sub.name()];
    return sub.commands.length > 0 ? leafCommands(sub, path) : [{ name: path.join(' '), command: sub }];
  });
}

/**
 * README's "Command line" lists every command of `factlog` with its options, and the paragraph
 * under it the options every command takes; docs/operations.md describes each command. A command
 * or option added to src/cli.ts without a word there fails here, and so does a README line for a
 * command the CLI does not have.
 */
t.test("README's command line and docs/operations.md name every command and option of the CLI", async (t) => {
  const readme = readFileSync('README.md', 'utf8');
  const start = readme.indexOf('\n## Command line\n');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const listed = [...section.matchAll(/^factlog ([a-z]+(?: [a-z]+)?)/gm)].map((match) => match[1]);
  const operations = readFileSync('docs/operations.md', 'utf8');
  const program = buildCli();
  const commands = leafCommands(program);
  t.same([...listed].sort(), commands.map((command) => command.name).sort(), 'one README line per command');
  const problems: string[] = [];
  for (const { name, command } of commands) {
    const line = section.split('\n').find((text) => text.startsWith(`factlog ${name}`)) ?? '';
    for (const option of command.options) if (option.long && !line.includes(option.long)) problems.push(`${name}: ${option.long} is not on its README line`);
    for (const argument of command.registeredArguments) if (!line.includes(`<${argument.name()}>`)) problems.push(`${name}: <${argument.name()}> is not on its README line`);
    if (!operations.includes(`factlog ${name}`)) problems.push(`${name}: docs/operations.md does not name it`);
  }
  for (const option of program.options) {
    if (option.long && option.long !== '--version' && !section.includes(`\`${option.long} `)) problems.push(`${option.long}, an option of every command, is not in README's command line`);
  }
  t.ok(section.includes('`factlog --version`'), '--version is');
  t.same(problems, [], `${commands.length} commands checked`);
});
