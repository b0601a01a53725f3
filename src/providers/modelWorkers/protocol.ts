import type { WordTableBuffers } from '../embeddings/wordTable.js';
import type { ConceptExtractionInput, FactExtractionInput, ImageInput, RefinementInput } from '../llm/port.js';
import { ModelCallError } from '../llm/port.js';
import { errorFrom, plainError, type PlainError } from '../../util/workerPool.js';

/**
 * What the API thread asks a model worker (worker.ts) through the WorkerPool
 * (src/util/workerPool.ts); errors travel as plain data and are rebuilt as the class they were
 * thrown as, so callers see the same errors as from the in-thread models.
 */

export type ModelCall =
  /** Load the language model now (at boot), not on the first call. */
  | { method: 'preloadChat' }
  /** Load (or convert, once per machine) the word table into shared buffers and answer them. */
  | { method: 'loadWordTable'; cacheDir?: string }
  /** Use this table, loaded by another worker. */
  | { method: 'useWordTable'; table: WordTableBuffers }
  | { method: 'extractFacts'; input: FactExtractionInput }
  | { method: 'extractImageFacts'; input: ImageInput }
  | { method: 'extractConcepts'; input: ConceptExtractionInput }
  | { method: 'refineConcepts'; input: RefinementInput }
  /** Answers the vectors as one Float64Array (texts × dimensions), transferred rather than copied. */
  | { method: 'embed'; texts: readonly string[] };

export interface SerializedError extends PlainError {
  /** ModelCallError's fields. */
  permanent?: boolean;
  status?: number;
}

export function serializeError(error: unknown): SerializedError {
  if (error instanceof ModelCallError) {
    return { name: error.name, message: error.message, permanent: error.permanent, ...(error.status === undefined ? {} : { status: error.status }) };
  }
  return plainError(error);
}

export function deserializeError(error: SerializedError): Error {
  switch (error.name) {
    case 'ModelCallError':
      return new ModelCallError(error.message, error.permanent === true, error.status);
    case 'TypeError':
      return new TypeError(error.message);
    case 'RangeError':
      return new RangeError(error.message);
    default:
      return errorFrom(error);
  }
}
