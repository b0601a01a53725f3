import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import type { Principal } from '../auth/rbac.js';
import { allowedContexts, isOntologyLevel } from '../domain/concept/ontology.js';
import type { CustomContext } from '../domain/repository/decider.js';
import { BUILT_IN_PROMPTSET_HASH, effectivePromptset, type PromptOverrides } from '../providers/llm/promptsets.js';
import { jsonColumn } from './present.js';

/** Every context concept extraction may assign in a repository, and the repository's own custom ones. */
export function presentContexts(preset: string, customContexts: CustomContext[]) {
  return {
    preset,
    contexts: allowedContexts(preset, customContexts).map((choice) => ({ ...choice, kind: isOntologyLevel(choice.name) ? 'built_in' : 'custom' })),
    custom_contexts: customContexts,
  };
}

/** The effective prompt of every phase, their hash, and which phases the repository overrides. */
export function presentPromptset(overrides: PromptOverrides | null) {
  const promptset = effectivePromptset(overrides);
  return { phases: promptset.phases, promptset_hash: promptset.hash, overridden: promptset.overridden, built_in_hash: BUILT_IN_PROMPTSET_HASH };
}

function storedOverrides(value: unknown): PromptOverrides | null {
  const parsed = jsonColumn(value);
  return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as PromptOverrides) : null;
}

/** Repository settings the pipeline reads: concept contexts and the promptset. */
export function settingQueries(deps: Pick<AppContext, 'db'>) {
  const knex = deps.db.knex;
  return {
    async contexts(principal: Principal, input: { repository: string }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'repositories:read');
      const row: { preset: string; custom_contexts: unknown } = await knex('repositories').where({ id: repository.id }).first('preset', 'custom_contexts');
      return presentContexts(row.preset, (jsonColumn(row.custom_contexts) ?? []) as CustomContext[]);
    },

    async promptset(principal: Principal, input: { repository: string }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'repositories:read');
      const row: { prompt_overrides?: unknown } | undefined = await knex('repositories').where({ id: repository.id }).first('prompt_overrides');
      return presentPromptset(storedOverrides(row?.prompt_overrides));
    },
  };
}
