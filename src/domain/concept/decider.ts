import { v5 as uuidv5 } from 'uuid';
import { DomainError, type Decider } from '../decider.js';
import type { ConceptCommand, ConceptEvent, ConceptState } from './events.js';

export type { ConceptCommand, ConceptEvent, ConceptState } from './events.js';

/** Namespace of concept ids (uuidv5); fixed forever, since ids are derived from it. */
export const CONCEPT_ID_NAMESPACE = '3b7c9a0e-5d2f-4e61-8f4a-2c9e1d7b6a53';

/** Longest canonical name, alias or context accepted, in characters. */
export const MAX_CONCEPT_NAME_CHARS = 200;

/**
 * A concept's id, derived from its uniqueness key so racing extractions of one concept write
 * one stream: uuidv5(`<repository>:<lower(trimmed canonical)>:<lower(trimmed context)>`).
 */
export function conceptIdFor(repositoryId: string, canonicalName: string, context: string): string {
  return uuidv5(`${repositoryId}:${canonicalName.trim().toLowerCase()}:${context.trim().toLowerCase()}`, CONCEPT_ID_NAMESPACE);
}

function checkName(what: string, value: string): string {
  const trimmed = value.trim();
  if (trimmed === '') throw new DomainError('invalid', `${what} must not be empty`);
  if (trimmed.length > MAX_CONCEPT_NAME_CHARS) throw new DomainError('invalid', `${what} must be at most ${MAX_CONCEPT_NAME_CHARS} characters`);
  return trimmed;
}

/**
 * The aliases of `candidates` that `known` (canonical name and aliases so far) lacks: trimmed,
 * empty and over-long ones dropped (model output; one bad alias must not fail a batch), and
 * deduplicated case-insensitively, first spelling kept.
 */
function newAliases(candidates: readonly string[], known: readonly string[]): string[] {
  const seen = new Set(known.map((name) => name.toLowerCase()));
  const fresh: string[] = [];
  for (const candidate of candidates) {
    const alias = candidate.trim();
    if (alias === '' || alias.length > MAX_CONCEPT_NAME_CHARS || seen.has(alias.toLowerCase())) continue;
    seen.add(alias.toLowerCase());
    fresh.push(alias);
  }
  return fresh;
}

function requireConcept(state: ConceptState): Exclude<ConceptState, { status: 'none' }> {
  if (state.status === 'none') throw new DomainError('not_found', 'concept not found');
  return state;
}

/**
 * A concept's life: created by concept extraction (or a context migration), aliases added and
 * pruned, embedded, and possibly merged into another concept. Commands on a merged concept
 * record nothing: the caller follows `state.survivorId`.
 */
export const conceptDecider: Decider<ConceptState, ConceptCommand, ConceptEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'CreateConcept': {
        const canonicalName = checkName('canonical name', command.canonicalName);
        const context = checkName('context', command.context);
        if (state.status === 'merged') return [];
        if (state.status === 'active') {
          // A twin (or a later source) created it first: what is left to record is the aliases it lacks.
          return newAliases(command.aliases, [state.canonicalName, ...state.aliases]).map((alias) => ({
            type: 'ConceptAliasAdded' as const,
            data: { alias },
          }));
        }
        const ontologyClass = command.ontologyClass?.trim() || null;
        return [
          {
            type: 'ConceptCreated',
            data: {
              canonical_name: canonicalName,
              context,
              ontology_class: ontologyClass,
              aliases: newAliases(command.aliases, [canonicalName]),
              source_id: command.sourceId,
            },
          },
        ];
      }
      case 'AddAliases': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        return newAliases(command.aliases, [concept.canonicalName, ...concept.aliases]).map((alias) => ({
          type: 'ConceptAliasAdded' as const,
          data: { alias },
        }));
      }
      case 'RemoveAlias': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        const lower = command.alias.trim().toLowerCase();
        // The canonical name is not an alias and is never removed; an unknown alias is already gone.
        const stored = concept.aliases.find((alias) => alias.toLowerCase() === lower);
        if (stored === undefined) return [];
        return [{ type: 'ConceptAliasRemoved', data: { alias: stored, reason: command.reason } }];
      }
      case 'RecordEmbedding': {
        const concept = requireConcept(state);
        if (concept.status === 'merged' || concept.embeddedWith === command.model) return [];
        if (command.model.trim() === '') throw new DomainError('invalid', 'embedding model must be named');
        if (!Number.isInteger(command.dimensions) || command.dimensions <= 0)
          throw new DomainError('invalid', 'dimensions must be a positive integer');
        // Packed float32: 4 bytes per dimension.
        if (Buffer.from(command.vector, 'base64').length !== command.dimensions * 4)
          throw new DomainError('invalid', `vector does not hold ${command.dimensions} float32 values`);
        return [{ type: 'ConceptEmbedded', data: { model: command.model, dimensions: command.dimensions, vector: command.vector } }];
      }
      case 'MergeConcept': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        if (command.survivorId.trim() === '') throw new DomainError('invalid', 'a merge needs a survivor');
        return [{ type: 'ConceptMergedInto', data: { survivor_id: command.survivorId, reason: command.reason } }];
      }
    }
  },

  evolve(state, event) {
    if (event.type === 'ConceptCreated') {
      if (state.status !== 'none') return state;
      return {
        status: 'active',
        canonicalName: event.data.canonical_name,
        context: event.data.context,
        aliases: [...event.data.aliases],
        embeddedWith: null,
        survivorId: null,
      };
    }
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'ConceptAliasAdded':
        if (state.aliases.some((alias) => alias.toLowerCase() === event.data.alias.toLowerCase())) return state;
        return { ...state, aliases: [...state.aliases, event.data.alias] };
      case 'ConceptAliasRemoved': {
        const lower = event.data.alias.toLowerCase();
        return { ...state, aliases: state.aliases.filter((alias) => alias.toLowerCase() !== lower) };
      }
      case 'ConceptEmbedded':
        return { ...state, embeddedWith: event.data.model };
      case 'ConceptMergedInto':
        return { ...state, status: 'merged', survivorId: event.data.survivor_id };
    }
  },
};
