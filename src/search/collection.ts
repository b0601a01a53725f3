/**
 * Search collections: what a searchable kind of thing (facts, concepts, later summaries and
 * reports) declares so that both SearchIndex adapters can index and query it without code of
 * their own for it. docs/search.md, "Adding a searchable collection", walks through one.
 *
 * A collection declares its fields by type (keyword, text, date, integer) and which of them are
 * filterable and sortable; the text fields are searched lexically in the collection's language;
 * `vectors` says whether it has embeddings for k-NN. The adapters derive the rest: the OpenSearch
 * mapping and its painless upsert scripts, the Postgres queries over the read model that holds
 * the collection's rows. The two backend sections (`postgres`, `opensearch`) say only what cannot
 * be derived: the read-model table and vector table, and the mapping version.
 */

import { conceptName, conceptNameKey } from '../domain/concept/decider.js';

/** Every document: its id and repository, and optionally a vector and a stream version. */
export interface IndexedDocument {
  id: string;
  repository_id: string;
  /** Omitted or undefined: keep the stored vector; null: remove it; numbers: set it. */
  vector?: number[] | null;
  /**
   * Version of the stream event that wrote this (collections with `versioned`). An index that
   * keeps documents ignores a write not newer than the one it holds, so a redelivered event
   * cannot undo later ones.
   */
  version?: number;
}

/** The declared fields of a document type: everything but id, repository, vector and version. */
export type FieldName<Doc> = Exclude<keyof Doc & string, keyof IndexedDocument>;

/** Fields holding a list of strings (set semantics, case-insensitive: aliases). */
export type ListFieldName<Doc> = { [K in FieldName<Doc>]: Doc[K] extends readonly string[] ? K : never }[FieldName<Doc>];

/** What a search returns for a document: its id and declared fields, and the score. */
export type HitOf<Doc> = Pick<Doc, FieldName<Doc>> & {
  id: string;
  /**
   * Relevance (higher is better); 0 when no query was given. Lexical scores are the adapter's
   * own (ts_rank_cd, BM25) and not comparable across adapters; k-NN scores are the cosine
   * similarity (-1..1) on every adapter.
   */
  score: number;
};

/**
 * A partial change to an indexed document: what later events know without the whole document
 * (a status, an alias gained or lost, a vector). Fields left undefined are kept. An index whose
 * lexical rows belong to a read model (Postgres) writes only the vector.
 */
export interface DocumentUpdate<Doc> {
  id: string;
  repository_id: string;
  /** New values of declared fields. */
  set?: Partial<Pick<Doc, FieldName<Doc>>>;
  /** Added to a list field unless present already (case-insensitively). */
  addTo?: Partial<Record<ListFieldName<Doc>, string[]>>;
  /** Removed from a list field wherever present (case-insensitively). */
  removeFrom?: Partial<Record<ListFieldName<Doc>, string[]>>;
  /** null removes the stored vector. */
  vector?: number[] | null;
  /** As IndexedDocument.version. */
  version?: number;
}

/** Lexical analysis: `english` stems and drops stop words; `simple` only lowercases (names). */
export type TextLanguage = 'english' | 'simple';

export type FieldSpec =
  | {
      readonly type: 'keyword';
      /** Usable in a query's `filters`. */
      readonly filter: boolean;
      readonly sort: boolean;
      /**
       * The value a document starts with: writing it again never replaces a later value (a
       * redelivered extraction does not move a `stable` fact back to `new`).
       */
      readonly initial?: string;
    }
  | {
      readonly type: 'text';
      readonly sort: boolean;
      /** A list of strings with set semantics (case-insensitive, blanks dropped). */
      readonly list: boolean;
      /** An empty string is a valid value (otherwise it is refused). */
      readonly mayBeEmpty: boolean;
    }
  | {
      readonly type: 'date';
      readonly sort: boolean;
      /** Indexing a document again keeps the earliest time given, not the latest. */
      readonly keepEarliest: boolean;
    }
  | { readonly type: 'integer'; readonly sort: boolean };

/** Field constructors, so a definition reads as a schema. */
export const field = {
  keyword: (options: { filter?: boolean; sort?: boolean; initial?: string } = {}): FieldSpec => ({
    type: 'keyword',
    filter: options.filter ?? false,
    sort: options.sort ?? false,
    ...(options.initial !== undefined ? { initial: options.initial } : {}),
  }),
  text: (options: { sort?: boolean; mayBeEmpty?: boolean } = {}): FieldSpec => ({
    type: 'text',
    sort: options.sort ?? false,
    list: false,
    mayBeEmpty: options.mayBeEmpty ?? false,
  }),
  textList: (): FieldSpec => ({ type: 'text', sort: false, list: true, mayBeEmpty: true }),
  date: (options: { sort?: boolean; keepEarliest?: boolean } = {}): FieldSpec => ({
    type: 'date',
    sort: options.sort ?? false,
    keepEarliest: options.keepEarliest ?? false,
  }),
  integer: (options: { sort?: boolean } = {}): FieldSpec => ({ type: 'integer', sort: options.sort ?? false }),
};

export interface SortKey<Name extends string = string> {
  field: Name;
  order: 'asc' | 'desc';
}

/** Where a collection lives on the Postgres adapter. */
export interface PostgresCollectionMapping {
  /**
   * The read model whose rows are the lexical index (written by its projection, not by the
   * adapter): `id`, `repository_id`, a column per declared field, and a tsvector column built
   * from the text fields with the collection's language.
   */
  readonly table: string;
  /** The tsvector column (default `search`). */
  readonly searchColumn?: string;
  /** Vector table `<table> (<key> text pk, repository_id text, embedding vector(N))`, created on first use. */
  readonly vectors?: { readonly table: string; readonly key: string };
  /** Fields the table holds elsewhere: an SQL expression over the row's alias (e.g. aliases from another table). */
  readonly computed?: Readonly<Record<string, (row: string) => string>>;
}

export interface OpenSearchCollectionMapping {
  /** Bump when the mapping derived from the fields changes; additive changes migrate in place. */
  readonly mappingVersion: number;
  /**
   * A field every complete document has: a partial document (an update that overtook its
   * document, on Kafka) lacks it, and searches skip it until the document arrives.
   */
  readonly completeField: string;
}

/** What a definition says, checked against the document type's fields. */
export interface CollectionDefinition<Doc extends IndexedDocument> {
  /** Lowercase; the OpenSearch alias is `<prefix>-<name>`. */
  readonly name: string;
  readonly language: TextLanguage;
  /** Every field of the document type but id, repository_id, vector and version. */
  readonly fields: { readonly [K in FieldName<Doc>]: FieldSpec };
  readonly vectors: boolean;
  /** Writes carry the stream version; older ones are ignored (needs a `version` on documents). */
  readonly versioned: boolean;
  /**
   * true: a document's writes may arrive out of order (on Kafka they come from several streams),
   * so a removal leaves a tombstone no later write revives, and an update of a document not yet
   * indexed makes a partial one. false: its writes arrive in order (one stream), a removal
   * deletes, and an update of a missing document is ignored.
   */
  readonly tombstones: boolean;
  /** Documents whose field holds one of these values are never found (merged ones). */
  readonly hidden?: { readonly field: FieldName<Doc>; readonly values: readonly string[] };
  /** Order of a ranked search after the score, and of a listing (no query); the id breaks ties last. */
  readonly order: { readonly ranked: readonly SortKey<FieldName<Doc>>[]; readonly listed: readonly SortKey<FieldName<Doc>>[] };
  readonly postgres: PostgresCollectionMapping;
  readonly opensearch: OpenSearchCollectionMapping;
}

/**
 * A checked collection, as the port's methods take it. The document type rides along (never set
 * at runtime) so that `search(facts, …)` returns fact hits.
 */
export interface SearchCollection<Doc extends IndexedDocument = IndexedDocument> {
  readonly name: string;
  readonly language: TextLanguage;
  readonly fields: Readonly<Record<string, FieldSpec>>;
  /** The text fields, searched lexically. */
  readonly textFields: readonly string[];
  readonly vectors: boolean;
  readonly versioned: boolean;
  readonly tombstones: boolean;
  readonly hidden?: { readonly field: string; readonly values: readonly string[] };
  readonly order: { readonly ranked: readonly SortKey[]; readonly listed: readonly SortKey[] };
  readonly postgres: PostgresCollectionMapping;
  readonly opensearch: OpenSearchCollectionMapping;
  readonly documentType?: Doc;
}

/** The value a tombstone's hidden field holds. */
export const TOMBSTONE = 'removed';

/** Checks a definition once, where it is made, so a mistake fails at start-up rather than in a query. */
export function defineCollection<Doc extends IndexedDocument>(definition: CollectionDefinition<Doc>): SearchCollection<Doc> {
  const fields: Readonly<Record<string, FieldSpec>> = definition.fields;
  const fail = (message: string): never => {
    throw new Error(`search collection ${definition.name}: ${message}`);
  };
  if (!/^[a-z][a-z0-9_-]{0,60}$/.test(definition.name)) fail('name must be lowercase letters, digits, "_" or "-", starting with a letter');
  const names = Object.keys(fields);
  for (const reserved of ['id', 'repository_id', 'version', 'embedding', 'score']) {
    if (names.includes(reserved)) fail(`${reserved} is no declared field (every collection has it, or it is reserved)`);
  }
  for (const name of names) if (!/^[a-z][a-z0-9_]*$/.test(name)) fail(`field ${name} must be lowercase letters, digits or "_"`);
  const textFields = names.filter((name) => fields[name].type === 'text');
  if (textFields.length === 0) fail('needs at least one text field to search');
  const sortable = (name: string) => fields[name]?.sort === true;
  for (const key of [...definition.order.ranked, ...definition.order.listed]) {
    if (!sortable(key.field)) fail(`order uses ${key.field}, which is not a sortable field`);
  }
  for (const name of names) {
    const spec = fields[name];
    if (spec.type === 'text' && spec.list && spec.sort) fail(`list field ${name} cannot be sortable`);
  }
  const hidden = definition.hidden;
  if (hidden !== undefined && fields[hidden.field]?.type !== 'keyword') fail(`hidden field ${hidden.field} must be a keyword field`);
  if (definition.tombstones && hidden === undefined) fail('tombstones need a hidden field to mark them');
  if (definition.vectors !== (definition.postgres.vectors !== undefined)) fail('postgres.vectors must be given exactly when the collection has vectors');
  if (!(definition.opensearch.completeField in fields)) fail(`opensearch.completeField ${definition.opensearch.completeField} is no declared field`);
  for (const name of Object.keys(definition.postgres.computed ?? {})) if (!(name in fields)) fail(`postgres.computed ${name} is no declared field`);
  const identifier = /^[a-z_][a-z0-9_]*$/;
  for (const name of [definition.postgres.table, definition.postgres.searchColumn ?? 'search', definition.postgres.vectors?.table, definition.postgres.vectors?.key]) {
    if (name !== undefined && !identifier.test(name)) fail(`postgres name ${name} must be a lowercase SQL identifier`);
  }
  return Object.freeze({
    name: definition.name,
    language: definition.language,
    fields,
    textFields,
    vectors: definition.vectors,
    versioned: definition.versioned,
    tombstones: definition.tombstones,
    ...(hidden !== undefined ? { hidden } : {}),
    order: definition.order,
    postgres: definition.postgres,
    opensearch: definition.opensearch,
  });
}

/** Keyword fields a query may filter on. */
export function filterableFields(collection: SearchCollection): string[] {
  return Object.keys(collection.fields).filter((name) => {
    const spec = collection.fields[name];
    return spec.type === 'keyword' && spec.filter;
  });
}

/** List fields (set semantics). */
export function listFields(collection: SearchCollection): string[] {
  return Object.keys(collection.fields).filter((name) => {
    const spec = collection.fields[name];
    return spec.type === 'text' && spec.list;
  });
}

/**
 * `current` plus `added` minus `removed`, compared by conceptNameKey (the domain's one rule for
 * names: composed, without case), first spelling of each key kept, in order, spelt as the domain
 * spells names (conceptName: trimmed, composed); blanks dropped. A list field holds names
 * (concepts' aliases), so `Café` typed composed and decomposed is one member, as in the read model.
 */
export function mergeAliases(current: readonly string[], added: readonly string[], removed: readonly string[]): string[] {
  const gone = new Set(removed.map(conceptNameKey));
  const result: string[] = [];
  const seen = new Set<string>();
  for (const alias of [...current, ...added]) {
    const key = conceptNameKey(alias);
    if (key === '' || seen.has(key) || gone.has(key)) continue;
    seen.add(key);
    result.push(conceptName(alias));
  }
  return result;
}

/**
 * The spellings, lower-cased, that a stored list member with `member`'s conceptNameKey may have
 * when lower-cased by an index that cannot compute the key itself (OpenSearch's painless scripts
 * lower-case only): lower case of the composed name, the key, and the key decomposed (a member an
 * older release indexed as a model spelt it). Derived from conceptName and conceptNameKey, so the
 * rule stays in one place.
 */
export function memberSpellings(member: string): string[] {
  const key = conceptNameKey(member);
  return [...new Set([conceptName(member).toLowerCase(), key, key.normalize('NFD')])];
}
