import { DomainError, type Decider } from '../decider.js';
import { findAllowedContext, isOntologyLevel } from '../concept/ontology.js';
import { findPreset } from './presets.js';
import { MAX_PROMPT_CHARS, PROMPT_PHASES, isPromptPhase, type PromptPhase } from './prompts.js';
import { isUuid } from '../../util/uuid.js';
import { runeLength } from '../../util/codePoints.js';

/** A context a repository adds to its preset's (RepositoryContextsChanged). */
export type CustomContext = { name: string; description: string };

/** One changed pair of ConceptRelationsRefreshed: concept_a < concept_b; 0 shared facts = no longer related. */
export type ConceptRelationChange = { concept_a: string; concept_b: string; shared_fact_count: number };

const MAX_CUSTOM_CONTEXTS = 50;
const MAX_CONTEXT_DESCRIPTION_CHARS = 500;
const CONTEXT_NAME_PATTERN = /^[a-z0-9][a-z0-9 _-]{0,62}$/;

const SLUG_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

export type RepositoryEvent =
  | {
      type: 'RepositoryCreated';
      data: {
        name: string;
        slug: string;
        description: string;
        preset: string;
        tier: string;
        accepted_promptset_hashes: string[];
        registry_id: string | null;
      };
    }
  | {
      type: 'RepositoryUpdated';
      data: { name: string | null; slug: string | null; description: string | null; accepted_promptset_hashes: string[] | null };
    }
  | { type: 'RepositoryDeleted'; data: { reason: string | null } }
  /** The full override map after the change (phase → prompt text); a phase not present uses the built-in prompt. */
  | { type: 'RepositoryPromptsChanged'; data: { prompts: Partial<Record<PromptPhase, string>> } }
  /** The repository's custom contexts after the change. */
  | { type: 'RepositoryContextsChanged'; data: { custom_contexts: CustomContext[] } }
  | { type: 'ContextMigrationRequested'; data: { from_context: string; to_context: string } }
  | { type: 'ConceptRelationsRefreshed'; data: { changes: ConceptRelationChange[] } };

export type RepositoryCommand =
  | {
      type: 'CreateRepository';
      name: string;
      slug: string;
      description: string;
      preset: string;
      tier: string;
      acceptedPromptsetHashes: string[];
      registryId: string | null;
    }
  | {
      type: 'UpdateRepository';
      name?: string;
      slug?: string;
      description?: string;
      acceptedPromptsetHashes?: string[];
    }
  | { type: 'DeleteRepository'; reason?: string }
  /** Sets (text) or removes (null) the override of each phase named; other phases keep theirs. */
  | { type: 'SetPrompts'; prompts: Partial<Record<string, string | null>> }
  /** Replaces the custom contexts with this list. */
  | { type: 'SetCustomContexts'; customContexts: CustomContext[] }
  | { type: 'RequestContextMigration'; fromContext: string; toContext: string }
  | { type: 'RecordRelationChanges'; changes: ConceptRelationChange[] };

export type RepositoryState =
  | { status: 'none' }
  | {
      status: 'active' | 'deleted';
      name: string;
      slug: string;
      description: string;
      acceptedPromptsetHashes: string[];
      preset: string;
      customContexts: CustomContext[];
      promptOverrides: Partial<Record<PromptPhase, string>>;
    };

function checkName(name: string): void {
  if (name.trim().length === 0 || runeLength(name) > 200) throw new DomainError('invalid', 'name must be 1 to 200 characters');
}
export function checkSlug(slug: string): void {
  if (!SLUG_PATTERN.test(slug))
    throw new DomainError('invalid', 'slug must be 1 to 64 lowercase letters, digits or inner hyphens');
  // `{repoID}` takes an id or a slug: a slug shaped like an id could name another repository.
  if (isUuid(slug)) throw new DomainError('invalid', 'slug must not have the shape of a repository id (a UUID)');
}

function requireActive(state: RepositoryState): Exclude<RepositoryState, { status: 'none' }> {
  if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
  if (state.status === 'deleted') throw new DomainError('gone', 'repository was deleted');
  return state;
}

/** The override map after applying `changes`, keys in PROMPT_PHASES order so equal maps compare equal. */
function applyPromptChanges(
  current: Partial<Record<PromptPhase, string>>,
  changes: Partial<Record<string, string | null>>,
): Partial<Record<PromptPhase, string>> {
  const merged: Partial<Record<PromptPhase, string | null>> = { ...current };
  for (const [phase, text] of Object.entries(changes)) {
    if (!isPromptPhase(phase)) throw new DomainError('invalid', `unknown prompt phase '${phase}'; phases are ${PROMPT_PHASES.join(', ')}`);
    if (text === undefined) continue;
    if (text !== null) {
      if (typeof text !== 'string' || text.trim() === '')
        throw new DomainError('invalid', `prompt of ${phase} must be non-empty text (null removes the override)`);
      if (runeLength(text) > MAX_PROMPT_CHARS) throw new DomainError('invalid', `prompt of ${phase} is longer than ${MAX_PROMPT_CHARS} characters`);
    }
    merged[phase] = text;
  }
  const result: Partial<Record<PromptPhase, string>> = {};
  for (const phase of PROMPT_PHASES) {
    const text = merged[phase];
    if (typeof text === 'string') result[phase] = text;
  }
  return result;
}

/** Custom contexts, normalised (lower-case trimmed names) and checked. */
function checkCustomContexts(contexts: readonly CustomContext[]): CustomContext[] {
  if (contexts.length > MAX_CUSTOM_CONTEXTS) throw new DomainError('invalid', `at most ${MAX_CUSTOM_CONTEXTS} custom contexts`);
  const seen = new Set<string>();
  return contexts.map((context) => {
    const name = context.name.trim().toLowerCase();
    if (!CONTEXT_NAME_PATTERN.test(name))
      throw new DomainError('invalid', `context name '${context.name}' must be 1 to 63 letters, digits, spaces, '_' or '-'`);
    if (isOntologyLevel(name)) throw new DomainError('invalid', `'${name}' is a built-in ontology level, not a custom context`);
    if (seen.has(name)) throw new DomainError('invalid', `context '${name}' is listed twice`);
    seen.add(name);
    const description = context.description.trim();
    if (runeLength(description) > MAX_CONTEXT_DESCRIPTION_CHARS)
      throw new DomainError('invalid', `description of '${name}' is longer than ${MAX_CONTEXT_DESCRIPTION_CHARS} characters`);
    return { name, description };
  });
}

/** Relation changes with each pair ordered (concept_a < concept_b) and checked. */
function checkRelationChanges(changes: readonly ConceptRelationChange[]): ConceptRelationChange[] {
  const seen = new Set<string>();
  return changes.map((change) => {
    if (!change.concept_a || !change.concept_b) throw new DomainError('invalid', 'a relation needs two concept ids');
    if (change.concept_a === change.concept_b) throw new DomainError('invalid', `concept ${change.concept_a} cannot relate to itself`);
    if (!Number.isInteger(change.shared_fact_count) || change.shared_fact_count < 0)
      throw new DomainError('invalid', 'shared_fact_count must be a non-negative integer');
    const [a, b] = change.concept_a < change.concept_b ? [change.concept_a, change.concept_b] : [change.concept_b, change.concept_a];
    const key = `${a} ${b}`;
    if (seen.has(key)) throw new DomainError('invalid', `the pair ${a}, ${b} is listed twice`);
    seen.add(key);
    return { concept_a: a, concept_b: b, shared_fact_count: change.shared_fact_count };
  });
}

export const repositoryDecider: Decider<RepositoryState, RepositoryCommand, RepositoryEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'CreateRepository': {
        if (state.status !== 'none') throw new DomainError('conflict', 'repository already exists');
        checkName(command.name);
        checkSlug(command.slug);
        if (!findPreset(command.preset)) throw new DomainError('invalid', `unknown preset '${command.preset}'`);
        return [
          {
            type: 'RepositoryCreated',
            data: {
              name: command.name.trim(),
              slug: command.slug,
              description: command.description,
              preset: command.preset,
              tier: command.tier,
              accepted_promptset_hashes: command.acceptedPromptsetHashes,
              registry_id: command.registryId,
            },
          },
        ];
      }
      case 'UpdateRepository': {
        if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
        if (state.status === 'deleted') throw new DomainError('gone', 'repository was deleted');
        if (command.name !== undefined) checkName(command.name);
        if (command.slug !== undefined) checkSlug(command.slug);
        const changed = {
          name: command.name !== undefined && command.name.trim() !== state.name ? command.name.trim() : null,
          slug: command.slug !== undefined && command.slug !== state.slug ? command.slug : null,
          description:
            command.description !== undefined && command.description !== state.description ? command.description : null,
          accepted_promptset_hashes:
            command.acceptedPromptsetHashes !== undefined &&
            JSON.stringify(command.acceptedPromptsetHashes) !== JSON.stringify(state.acceptedPromptsetHashes)
              ? command.acceptedPromptsetHashes
              : null,
        };
        // An update that changes nothing records nothing.
        if (Object.values(changed).every((value) => value === null)) return [];
        return [{ type: 'RepositoryUpdated', data: changed }];
      }
      case 'DeleteRepository': {
        if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
        if (state.status === 'deleted') return [];
        return [{ type: 'RepositoryDeleted', data: { reason: command.reason ?? null } }];
      }
      case 'SetPrompts': {
        const repository = requireActive(state);
        const prompts = applyPromptChanges(repository.promptOverrides, command.prompts);
        if (JSON.stringify(prompts) === JSON.stringify(repository.promptOverrides)) return [];
        return [{ type: 'RepositoryPromptsChanged', data: { prompts } }];
      }
      case 'SetCustomContexts': {
        const repository = requireActive(state);
        const customContexts = checkCustomContexts(command.customContexts);
        if (JSON.stringify(customContexts) === JSON.stringify(repository.customContexts)) return [];
        return [{ type: 'RepositoryContextsChanged', data: { custom_contexts: customContexts } }];
      }
      case 'RequestContextMigration': {
        const repository = requireActive(state);
        const from = command.fromContext.trim();
        if (from === '') throw new DomainError('invalid', 'from_context must not be empty');
        const to = findAllowedContext(command.toContext, repository.preset, repository.customContexts);
        if (!to) throw new DomainError('invalid', `'${command.toContext}' is not a context of this repository`);
        if (from.toLowerCase() === to.name.toLowerCase()) throw new DomainError('invalid', 'from_context and to_context must differ');
        return [{ type: 'ContextMigrationRequested', data: { from_context: from, to_context: to.name } }];
      }
      case 'RecordRelationChanges': {
        if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
        // A refresh that raced the repository's deletion has nothing left to record.
        if (state.status === 'deleted' || command.changes.length === 0) return [];
        return [{ type: 'ConceptRelationsRefreshed', data: { changes: checkRelationChanges(command.changes) } }];
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'RepositoryCreated':
        return {
          status: 'active',
          name: event.data.name,
          slug: event.data.slug,
          description: event.data.description,
          acceptedPromptsetHashes: event.data.accepted_promptset_hashes,
          preset: event.data.preset,
          customContexts: [],
          promptOverrides: {},
        };
      case 'RepositoryUpdated':
        if (state.status === 'none') return state;
        return {
          ...state,
          name: event.data.name ?? state.name,
          slug: event.data.slug ?? state.slug,
          description: event.data.description ?? state.description,
          acceptedPromptsetHashes: event.data.accepted_promptset_hashes ?? state.acceptedPromptsetHashes,
        };
      case 'RepositoryDeleted':
        if (state.status === 'none') return state;
        return { ...state, status: 'deleted' };
      case 'RepositoryPromptsChanged':
        if (state.status === 'none') return state;
        return { ...state, promptOverrides: { ...event.data.prompts } };
      case 'RepositoryContextsChanged':
        if (state.status === 'none') return state;
        return { ...state, customContexts: event.data.custom_contexts.map((context) => ({ ...context })) };
      case 'ContextMigrationRequested':
      case 'ConceptRelationsRefreshed':
        return state;
    }
  },
};
