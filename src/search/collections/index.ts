import type { SearchCollection } from '../collection.js';
import { concepts } from './concepts.js';
import { facts } from './facts.js';
import { summaries } from './summaries.js';

export { concepts, type ConceptDocument } from './concepts.js';
export { facts, type FactDocument, type FactHit } from './facts.js';
export { summaries, type SummaryDocument } from './summaries.js';

/** The collections the service indexes: both adapters serve these unless given others. */
export const searchCollections: readonly SearchCollection[] = [facts, concepts, summaries];
