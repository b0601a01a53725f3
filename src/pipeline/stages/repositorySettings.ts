import type { Knex } from 'knex';
import { coalescer } from '../../db/coalesce.js';
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

/** The columns of a `repositories` row the stages read. */
interface SettingsRow {
  id: string;
  preset: string;
  custom_contexts: unknown;
  prompt_overrides: unknown;
  deleted_at: unknown;
}

const SETTINGS_COLUMNS = ['id', 'preset', 'custom_contexts', 'prompt_overrides', 'deleted_at'] as const;

interface SettingsRead {
  repositoryId: string;
  resolve(row: SettingsRow | undefined): void;
  reject(error: unknown): void;
}

/** One reader per database: its reads of the same moment go as one statement. */
const settingsReaders = new WeakMap<Knex, (read: SettingsRead) => void>();

function settingsReaderOf(knex: Knex): (read: SettingsRead) => void {
  let reader = settingsReaders.get(knex);
  if (reader === undefined) {
    reader = coalescer<SettingsRead>(async (batch) => {
      const rows: SettingsRow[] = await knex('repositories')
        .whereIn('id', [...new Set(batch.map((call) => call.repositoryId))])
        .select(...SETTINGS_COLUMNS);
      const byId = new Map(rows.map((row) => [row.id, row]));
      for (const call of batch) call.resolve(byId.get(call.repositoryId));
    });
    settingsReaders.set(knex, reader);
  }
  return reader;
}

/**
 * The repository's row, read after the call: every job of the model-calling stages reads its
 * repository's settings first (about two statements a page). Reads that arrive while one is out
 * go together as the next statement (src/db/coalesce.ts), so each still sees the row as it is
 * after its own call. Inside a transaction, the transaction reads it.
 */
function readSettingsRow(knex: Knex, repositoryId: string): Promise<SettingsRow | undefined> {
  if ((knex as Knex.Transaction).isTransaction === true) {
    return knex('repositories').where({ id: repositoryId }).first(...SETTINGS_COLUMNS);
  }
  const read = settingsReaderOf(knex);
  return new Promise((resolve, reject) => read({ repositoryId, resolve, reject }));
}

/**
 * The repository's settings from the `repositories` read model (preset, custom_contexts,
 * prompt_overrides). A repository that is missing or deleted cannot be processed: permanent.
 */
export async function loadRepositorySettings(knex: Knex, repositoryId: string): Promise<RepositorySettings> {
  const row = await readSettingsRow(knex, repositoryId);
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
  const row = await readSettingsRow(knex, repositoryId);
  return row !== undefined && !row.deleted_at;
}
