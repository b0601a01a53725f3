import type { Principal } from '../auth/rbac.js';
import { repositoryDecider, type CustomContext } from '../domain/repository/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { presentContexts, presentPromptset } from '../read/settings.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';

/** Repository settings commands: custom concept contexts and prompt overrides. Both answer from the decider's state, which the read model may still be catching up to. */
export function settingCommands(deps: Pick<AppContext, 'db' | 'commands'>) {
  const execute = async (principal: Principal, repository: string, command: Parameters<typeof repositoryDecider.decide>[0], trace?: Trace) => {
    const { id } = await authorizeRepository(deps.db.knex, principal, repository, 'repositories:write');
    const result = await deps.commands.execute(streamName('repository', id), repositoryDecider, command, commandMetadata(principal, id, trace));
    return result.state;
  };

  return {
    /** Replaces the repository's own custom contexts as a whole. */
    async setContexts(principal: Principal, input: { repository: string; custom_contexts: { name: string; description?: string }[] }, trace?: Trace) {
      const customContexts: CustomContext[] = input.custom_contexts.map((c) => ({ name: c.name, description: c.description ?? '' }));
      const state = await execute(principal, input.repository, { type: 'SetCustomContexts', customContexts }, trace);
      if (state.status === 'none') throw new Error('unreachable: the repository was authorized above');
      return presentContexts(state.preset, state.customContexts);
    },

    /** Sets (text) or clears (null) the override of each named phase; phases not named keep theirs. */
    async setPrompts(principal: Principal, input: { repository: string; prompts: Record<string, string | null> }, trace?: Trace) {
      const state = await execute(principal, input.repository, { type: 'SetPrompts', prompts: input.prompts }, trace);
      return presentPromptset(state.status === 'none' ? null : state.promptOverrides);
    },
  };
}
