import type { Knex } from 'knex';
import { allowedContexts } from '../../domain/concept/ontology.js';
import type { ConceptContextChoice } from '../../providers/llm/port.js';
import { effectivePromptset, type PromptOverrides, type Promptset } from '../../providers/llm/promptsets.js';
import { PermanentJobError } from '../types.js';

/** What the model-calling stages need of a repository: its concept contexts and its promptset. */
export interface RepositorySettings {
  contexts: ConceptContextChoice[];
  promptset: Promptset;
}

/** jsonb arrives parsed from pg and PGlite alike; a string (older drivers) is parsed here. */
function jsonValue<T>(value: unknown, fallback: T): T {
  if (value === null || value === undefined) return fallback;
  if (typeof value === 'string') {
    try {
      return JSON.parse(value) as T;
    } catch {
      return fallback;
    }
  }
  return value as T;
}

function customContextsOf(value: unknown): Array<{ name: string; description: string }> {
  const list = jsonValue<unknown>(value, []);
  if (!Array.isArray(list)) return [];
  return list.flatMap((entry) => {
    if (typeof entry !== 'object' || entry === null) return [];
    const { name, description } = entry as { name?: unknown; description?: unknown };
    return typeof name === 'string' && name.trim() !== '' ? [{ name, description: typeof description === 'string' ? description : '' }] : [];
  });
}

/**
 * The repository's settings from the `repositories` read model (preset, custom_contexts,
 * prompt_overrides). A repository that is missing or deleted cannot be processed: permanent.
 */
export async function loadRepositorySettings(knex: Knex, repositoryId: string): Promise<RepositorySettings> {
  const row: { preset: string; custom_contexts: unknown; prompt_overrides: unknown; deleted_at: unknown } | undefined = await knex('repositories')
    .where({ id: repositoryId })
    .first('preset', 'custom_contexts', 'prompt_overrides', 'deleted_at');
  if (!row) throw new PermanentJobError(`repository ${repositoryId} is not in the read model`);
  if (row.deleted_at) throw new PermanentJobError(`repository ${repositoryId} was deleted`);
  return {
    contexts: allowedContexts(row.preset, customContextsOf(row.custom_contexts)),
    promptset: effectivePromptset(jsonValue<PromptOverrides>(row.prompt_overrides, {})),
  };
}

/** The promptset lookup source_decomposition takes: the repository's effective promptset. */
export function promptsetLookup(knex: Knex): (repositoryId: string) => Promise<Promptset> {
  return async (repositoryId) => (await loadRepositorySettings(knex, repositoryId)).promptset;
}

/** Whether the repository exists in the read model and is not deleted (scheduled jobs of a deleted one have nothing to do). */
export async function isLiveRepository(knex: Knex, repositoryId: string): Promise<boolean> {
  const row: { deleted_at: unknown } | undefined = await knex('repositories').where({ id: repositoryId }).first('deleted_at');
  return row !== undefined && !row.deleted_at;
}
