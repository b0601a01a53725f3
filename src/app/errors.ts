import { DomainError } from '../domain/decider.js';

/**
 * Failures of the application layer, whatever the transport. They are DomainErrors, so one
 * mapper (src/api/errors.ts for HTTP) turns each into its answer; the two below carry more.
 */
export const notFound = (what: string) => new DomainError('not_found', `${what} not found`);
export const forbidden = (message = 'permission denied') => new DomainError('forbidden', message);
export const invalid = (message: string) => new DomainError('invalid', message);
export const conflict = (message: string) => new DomainError('conflict', message);

/** A concept name several contexts share, asked for without a context: the caller can pick one of `contexts`. */
export class AmbiguousConceptError extends DomainError {
  constructor(
    readonly conceptName: string,
    readonly contexts: string[],
  ) {
    super('conflict', `concept '${conceptName}' exists in several contexts (${contexts.join(', ')}): pass context= to pick one`);
  }
}

/** Content of a type the pipeline cannot read (an upload that is not HTML, PDF, Markdown or text). */
export class UnsupportedContentError extends DomainError {
  constructor(message: string) {
    super('invalid', message);
  }
}
