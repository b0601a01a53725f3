import { v5 as uuidv5 } from 'uuid';
import { DomainError, type Decider, type UnreadData } from '../decider.js';
import type { ConceptCommand, ConceptEvent, ConceptState, SliceWrite } from './events.js';
import { citationProblem } from './summaries.js';
import { runeLength } from '../../util/codePoints.js';

export type { ConceptCommand, ConceptEvent, ConceptState, SliceWrite } from './events.js';

/** Longest Markdown of a slice or synthesis accepted, in characters (an event must stay small). */
export const MAX_DERIVED_CONTENT_CHARS = 200_000;

/** Namespace of concept ids (uuidv5); fixed forever, since ids are derived from it. */
export const CONCEPT_ID_NAMESPACE = '3b7c9a0e-5d2f-4e61-8f4a-2c9e1d7b6a53';

/** Longest canonical name, alias or context accepted, in characters. */
const MAX_CONCEPT_NAME_CHARS = 200;

/**
 * A concept name or alias as the domain records it: trimmed and composed (NFC). A model or a
 * source may spell `café` decomposed (`e` + U+0301); composed, the two spellings are one name,
 * as a name asked for is composed before it is looked up (src/read/concepts.ts).
 */
export function conceptName(name: string): string {
  return name.trim().normalize('NFC');
}

/**
 * The key names are compared and looked up by (`concept_aliases.alias_lower`, the id below):
 * conceptName with its compatibility forms folded (NFKC), lower-cased, folded again. NFKC is NFC
 * and more: full-width letters (`ＡＩ`), ligatures (`ﬁ`), sub- and superscript digits (`H₂O`),
 * half-width kana and the no-break space are the plain characters they stand for, so `ＡＩ` and
 * `AI` are one concept, as a typist or a PDF's text layer may spell either; the name is kept as
 * written (conceptName), only its key is folded. Accents are not folded: `café` and `cafe` are
 * two names, as in Wikidata (docs/pipeline.md). Lower case may be decomposed where the capital
 * had no composed form (`T` + U+0308 lower-cases to `t` + U+0308, which composes to U+1E97 `ẗ`),
 * so only folding after lower-casing gives one key for every spelling. An ASCII name's key is its
 * lower case, as it always was. Every key is made here.
 */
export function conceptNameKey(name: string): string {
  return conceptName(name).normalize('NFKC').toLowerCase().normalize('NFKC');
}

/**
 * A concept's id, derived from its uniqueness key so racing extractions of one concept write
 * one stream: uuidv5(`<repository>:<conceptNameKey(canonical)>:<lower(trimmed context)>`). An
 * ASCII name's key is its trimmed lower case, as it was before names were composed, so its id stays.
 */
export function conceptIdFor(repositoryId: string, canonicalName: string, context: string): string {
  return uuidv5(`${repositoryId}:${conceptNameKey(canonicalName)}:${context.trim().toLowerCase()}`, CONCEPT_ID_NAMESPACE);
}

/**
 * The id a concept takes when it moves into a context whose concept of its name was merged into
 * it before (a context migration undone): that concept's id leads back to the one moving, which
 * cannot merge into itself. Derived from both, so a rerun of the move finds the same concept.
 */
export function conceptIdOfReturn(naturalId: string, movingId: string): string {
  return uuidv5(`${naturalId}:returned:${movingId}`, CONCEPT_ID_NAMESPACE);
}

function checkName(what: string, value: string): string {
  const trimmed = value.trim();
  if (trimmed === '') throw new DomainError('invalid', `${what} must not be empty`);
  if (runeLength(trimmed) > MAX_CONCEPT_NAME_CHARS) throw new DomainError('invalid', `${what} must be at most ${MAX_CONCEPT_NAME_CHARS} characters`);
  return trimmed;
}

/**
 * The names of `candidates` that `known` (a concept's canonical name and aliases so far, or none)
 * lacks: as conceptName spells them, empty and over-long ones dropped (model output; one bad name
 * must not fail a batch), and deduplicated by conceptNameKey, first spelling kept. `known` may
 * hold names recorded before names were composed: they are compared by their key too. The
 * decider's new aliases and the concepts stage's candidate names are both made here.
 */
export function distinctConceptNames(candidates: readonly string[], known: readonly string[] = []): string[] {
  const seen = new Set(known.map(conceptNameKey));
  const fresh: string[] = [];
  for (const candidate of candidates) {
    const name = conceptName(candidate);
    const key = conceptNameKey(name);
    if (name === '' || runeLength(name) > MAX_CONCEPT_NAME_CHARS || seen.has(key)) continue;
    seen.add(key);
    fresh.push(name);
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
        const canonicalName = checkName('canonical name', conceptName(command.canonicalName));
        const context = checkName('context', command.context);
        if (state.status === 'merged') return [];
        if (state.status === 'active') {
          // A twin (or a later source) created it first: what is left to record is the aliases it lacks.
          return distinctConceptNames(command.aliases, [state.canonicalName, ...state.aliases]).map((alias) => ({
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
              aliases: distinctConceptNames(command.aliases, [canonicalName]),
              source_id: command.sourceId,
            },
          },
        ];
      }
      case 'AddAliases': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        return distinctConceptNames(command.aliases, [concept.canonicalName, ...concept.aliases]).map((alias) => ({
          type: 'ConceptAliasAdded' as const,
          data: { alias },
        }));
      }
      case 'RemoveAlias': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        const key = conceptNameKey(command.alias);
        // The canonical name is not an alias and is never removed; an unknown alias is already gone.
        const stored = concept.aliases.find((alias) => conceptNameKey(alias) === key);
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
      case 'WriteSummarySlices':
        return decideSlices(command, requireConcept(state));
      case 'RecordSynthesis': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') return [];
        if (concept.synthesisInputs === command.inputsHash && !concept.resynthesisRequested) return [];
        checkContent(command.content, new Set(command.allowedFactIds), 'synthesis');
        return [
          {
            type: 'ConceptSynthesized',
            data: {
              synthesis_id: command.synthesisId,
              content: command.content,
              fact_ids: [...new Set(command.factIds)],
              slice_ids: command.sliceIds,
              related_concept_ids: command.relatedConceptIds,
              related_synthesis_ids: command.relatedSynthesisIds,
              image_fact_ids: command.imageFactIds,
              model_id: command.modelId,
              inputs_hash: command.inputsHash,
              reason: concept.resynthesisRequested ? 'requested' : 'inputs_changed',
            },
          },
        ];
      }
      case 'RemoveSynthesis': {
        const concept = requireConcept(state);
        // Nothing to remove: never synthesised, removed already, or merged (its rows went with the merge).
        if (concept.status === 'merged' || concept.synthesisInputs === null) return [];
        return [{ type: 'ConceptSynthesisRemoved', data: { synthesis_id: command.synthesisId, reason: command.reason } }];
      }
      case 'RequestResynthesis': {
        const concept = requireConcept(state);
        if (concept.status === 'merged') throw new DomainError('conflict', 'the concept was merged into another');
        return [{ type: 'ConceptResynthesisRequested', data: { reason: [...command.reason.trim()].slice(0, 500).join('') } }];
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
        slices: [],
        synthesisInputs: null,
        resynthesisRequested: false,
      };
    }
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'ConceptAliasAdded': {
        const key = conceptNameKey(event.data.alias);
        if (state.aliases.some((alias) => conceptNameKey(alias) === key)) return state;
        return { ...state, aliases: [...state.aliases, event.data.alias] };
      }
      case 'ConceptAliasRemoved': {
        const key = conceptNameKey(event.data.alias);
        return { ...state, aliases: state.aliases.filter((alias) => conceptNameKey(alias) !== key) };
      }
      case 'ConceptEmbedded':
        return { ...state, embeddedWith: event.data.model };
      case 'ConceptMergedInto':
        return { ...state, status: 'merged', survivorId: event.data.survivor_id };
      case 'SummarySliceWritten': {
        const slice = { sliceNumber: event.data.slice_number, factIds: [...event.data.fact_ids], isOpen: event.data.is_open };
        const others = state.slices.filter((existing) => existing.sliceNumber !== slice.sliceNumber);
        return { ...state, slices: [...others, slice].sort((a, b) => a.sliceNumber - b.sliceNumber) };
      }
      case 'SummarySliceRemoved':
        return { ...state, slices: state.slices.filter((existing) => existing.sliceNumber !== event.data.slice_number) };
      case 'ConceptSynthesized':
        return { ...state, synthesisInputs: event.data.inputs_hash, resynthesisRequested: false };
      case 'ConceptResynthesisRequested':
        return { ...state, resynthesisRequested: true };
      case 'ConceptSynthesisRemoved':
        return { ...state, synthesisInputs: null, resynthesisRequested: false };
    }
  },
};

/**
 * What conceptDecider's evolve never reads: the Markdown of slices and syntheses (half a concept
 * stream's bytes each) and an embedding's vector. Stages that only fold a concept's state read
 * its stream without them.
 */
export const conceptUnreadData = {
  SummarySliceWritten: ['content'],
  ConceptSynthesized: ['content'],
  ConceptEmbedded: ['vector'],
} as const satisfies UnreadData<ConceptEvent>;

type LiveConcept = Exclude<ConceptState, { status: 'none' }>;

function checkContent(content: string, allowed: ReadonlySet<string>, what: string): void {
  // In characters (code points): an emoji or an astral-plane ideograph is one, not two UTF-16
  // units. Units are never fewer than characters, so only a text of more units is counted.
  if (content.length > MAX_DERIVED_CONTENT_CHARS && runeLength(content) > MAX_DERIVED_CONTENT_CHARS) throw new DomainError('invalid', `the ${what} is longer than ${MAX_DERIVED_CONTENT_CHARS} characters`);
  const problem = citationProblem(content, allowed);
  if (problem !== null) throw new DomainError('invalid', `the ${what} was refused: ${problem}`);
}

/**
 * The slice rules: every slice covers 1..batchSize distinct facts and cites only those; a frozen
 * slice holds exactly batchSize facts, an open one fewer; a frozen slice is rewritten only when
 * facts it covered left the concept; afterwards slices are numbered 1..n and only the last may
 * be open. A slice written again with the same facts and openness records nothing (a twin's
 * run, or a retry).
 */
function decideSlices(command: Extract<ConceptCommand, { type: 'WriteSummarySlices' }>, concept: LiveConcept): ConceptEvent[] {
  if (concept.status === 'merged') return [];
  if (!Number.isInteger(command.batchSize) || command.batchSize < 1) throw new DomainError('invalid', 'batch size must be a positive integer');
  const current = new Map(concept.slices.map((slice) => [slice.sliceNumber, slice]));
  const events: ConceptEvent[] = [];
  const after = new Map(current);
  for (const removed of command.removed) {
    if (!after.has(removed.sliceNumber)) continue;
    after.delete(removed.sliceNumber);
    events.push({ type: 'SummarySliceRemoved', data: { slice_id: removed.sliceId, slice_number: removed.sliceNumber, reason: command.removeReason } });
  }
  for (const slice of command.slices) {
    checkSlice(slice, command.batchSize);
    const previous = current.get(slice.sliceNumber);
    if (previous && previous.isOpen === slice.isOpen && sameFacts(previous.factIds, slice.factIds)) continue;
    if (previous && !previous.isOpen && slice.reason !== 'facts_removed') {
      throw new DomainError('conflict', `summary slice ${slice.sliceNumber} is frozen: only facts leaving the concept rewrite it`);
    }
    after.set(slice.sliceNumber, { sliceNumber: slice.sliceNumber, factIds: slice.factIds, isOpen: slice.isOpen });
    events.push({
      type: 'SummarySliceWritten',
      data: {
        slice_id: slice.sliceId,
        slice_number: slice.sliceNumber,
        is_open: slice.isOpen,
        fact_ids: [...slice.factIds],
        content: slice.content,
        model_id: command.modelId,
        reason: slice.reason,
      },
    });
  }
  const numbers = [...after.keys()].sort((a, b) => a - b);
  numbers.forEach((number, index) => {
    if (number !== index + 1) throw new DomainError('invalid', `summary slices must be numbered 1..n; slice ${index + 1} is missing`);
    if (after.get(number)?.isOpen && index !== numbers.length - 1) throw new DomainError('invalid', `only the last summary slice may be open, not slice ${number}`);
  });
  const seen = new Set<string>();
  for (const number of numbers) {
    for (const factId of after.get(number)?.factIds ?? []) {
      if (seen.has(factId)) throw new DomainError('invalid', `fact ${factId} is in two summary slices`);
      seen.add(factId);
    }
  }
  return events;
}

function checkSlice(slice: SliceWrite, batchSize: number): void {
  if (!Number.isInteger(slice.sliceNumber) || slice.sliceNumber < 1) throw new DomainError('invalid', 'slice numbers start at 1');
  const distinct = new Set(slice.factIds);
  if (distinct.size !== slice.factIds.length) throw new DomainError('invalid', `summary slice ${slice.sliceNumber} lists a fact twice`);
  if (distinct.size === 0) throw new DomainError('invalid', `summary slice ${slice.sliceNumber} covers no fact`);
  if (slice.isOpen ? distinct.size >= batchSize : distinct.size !== batchSize) {
    throw new DomainError('invalid', `summary slice ${slice.sliceNumber}: a ${slice.isOpen ? 'open slice holds fewer than' : 'frozen slice holds exactly'} ${batchSize} facts, not ${distinct.size}`);
  }
  checkContent(slice.content, distinct, `summary slice ${slice.sliceNumber}`);
}

function sameFacts(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((id, index) => id === b[index]);
}
