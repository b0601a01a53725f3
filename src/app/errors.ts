import { DomainError } from '../domain/decider.js';

/**
 * Failures of the application layer, whatever the transport. They are DomainErrors, so one
 * mapper (src/api/errors.ts for HTTP) turns each into its answer; the two below carry more.
 */
export const notFound = (what: string) => new DomainError('not_found', `${what} not found`);
export const forbidden = (message = 'permission denied') => new DomainError('forbidden', message);
export const invalid = (message: string) => new DomainError('invalid', message);
export const conflict = (message: string) => new DomainError('conflict', message);

/** A concept a name may mean, as an ambiguous lookup lists them. */
export interface ConceptCandidate {
  id: string;
  canonical_name: string;
  context: string;
}

/**
 * A name (canonical or alias) that several active concepts answer to. Across contexts a
 * `context` picks one; within one context (an alias two concepts share) only a canonical name
 * or an id does, so the message says that instead. `pickedBy` is the input that picks the
 * context of this name, where a call names two concepts (the pair route's `other_context`).
 */
export class AmbiguousConceptError extends DomainError {
  readonly contexts: string[];

  constructor(
    readonly conceptName: string,
    readonly candidates: ConceptCandidate[],
    pickedBy = 'context',
  ) {
    const contexts = [...new Set(candidates.map((candidate) => candidate.context))].sort();
    super(
      'conflict',
      contexts.length > 1
        ? `concept '${conceptName}' exists in several contexts (${contexts.join(', ')}): pass ${pickedBy}= to pick one`
        : `'${conceptName}' names several concepts in context ${contexts[0]} (${candidates.map((candidate) => candidate.canonical_name).join(', ')}): ask for one by its canonical name or id`,
    );
    this.contexts = contexts;
  }
}

/** Content of a type the pipeline cannot read (an upload that is not HTML, PDF, Markdown or text). */
export class UnsupportedContentError extends DomainError {
  constructor(message: string) {
    super('invalid', message);
  }
}

/**
 * A command could not tell whether it may be made (whether what it is about to add exists
 * already, whether the caller still holds a role): the read model it decides on has not applied
 * what an earlier holder of its lock wrote (src/app/lockMarks.ts), or is being rebuilt, within the
 * command's wait. Nothing was appended; retry (HTTP 503).
 */
export class ReadModelsBehindError extends Error {
  override readonly name = 'ReadModelsBehindError';
  constructor(
    readonly readModels: readonly string[],
    what: string,
  ) {
    super(`cannot tell whether ${what} yet: read model ${readModels.join(', ')} has not applied the latest events; nothing was changed, retry in a few seconds`);
  }
}
