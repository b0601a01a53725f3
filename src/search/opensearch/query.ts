import { TOMBSTONE, type SearchCollection, type SortKey } from '../collection.js';
import { filterValues, websearchQueryText, type KnnQuery, type SearchQuery } from '../port.js';
import { parseWebsearch } from '../websearch.js';
import { sortField } from './mappings.js';

/**
 * Query building: the websearch syntax both adapters accept, translated for OpenSearch, and the
 * search bodies for lexical and k-NN queries over one collection.
 */

/**
 * Translates websearch_to_tsquery syntax into simple_query_string syntax, so both adapters read
 * a query alike: words are ANDed, "quoted text" is a phrase, `or` between terms is OR (binding
 * looser than AND, as in tsquery), and `-term` / `-"phrase"` is negation (parseWebsearch). Every
 * other character is escaped, so `*`, `~`, `+`, `|`, `(` mean nothing special, as in websearch
 * syntax. Returns null when the query holds no term (tsquery then matches nothing).
 */
export function websearchToSimpleQueryString(text: string): string | null {
  const escape = (value: string) => value.replace(/[+|\-"*()~\\]/g, (char) => `\\${char}`);
  const groups = parseWebsearch(text).map((group) =>
    group.map((term) => {
      const written = term.phrase ? `"${escape(term.text)}"` : escape(term.text);
      return term.negated ? `-${written}` : written;
    }),
  );
  if (groups.length === 0) return null;
  return groups.map((group) => `(${group.join(' + ')})`).join(' | ');
}

/** OpenSearch's default `index.max_terms_count`: a `terms` query with more values is refused. */
export const MAX_TERMS_PER_QUERY = 65_536;

/**
 * Documents whose id is one of `ids`, however many: a concept or context may link more facts than
 * one `terms` query takes, so a longer list is split into several, any of which may match.
 */
function idsFilter(ids: readonly string[]): Record<string, unknown> {
  if (ids.length <= MAX_TERMS_PER_QUERY) return { terms: { id: [...ids] } };
  const should = [];
  for (let start = 0; start < ids.length; start += MAX_TERMS_PER_QUERY) should.push({ terms: { id: ids.slice(start, start + MAX_TERMS_PER_QUERY) } });
  return { bool: { should, minimum_should_match: 1 } };
}

/**
 * Filters every search of a collection shares: the repository, complete documents only (not the
 * partial ones an early update makes), no hidden documents or tombstones, none the query hides,
 * the ids and filters.
 */
function restrictions(collection: SearchCollection, query: Pick<SearchQuery, 'repositoryId' | 'ids' | 'hide' | 'filters'>) {
  const hidden = collection.hidden;
  const hiddenValues = hidden ? [...hidden.values, ...(collection.tombstones ? [TOMBSTONE] : [])] : [];
  return {
    filter: [
      { term: { repository_id: query.repositoryId } },
      { exists: { field: collection.opensearch.completeField } },
      ...(query.ids !== undefined ? [idsFilter(query.ids)] : []),
      ...filterValues(query.filters).map(([name, values]) => ({ terms: { [name]: values } })),
    ],
    must_not: [...(hidden ? [{ terms: { [hidden.field]: hiddenValues } }] : []), ...(query.hide !== undefined && query.hide.length > 0 ? [idsFilter(query.hide)] : [])],
  };
}

/** The fields a search returns in `_source`. */
const returnedFields = (collection: SearchCollection) => ['id', ...Object.keys(collection.fields)];

/**
 * The body of a lexical search, or null when the query holds no term (it matches nothing).
 * Ranked: best first, then the collection's order, then id; a listing (no query) in the
 * collection's listing order; a query's own sort replaces either. The same orders as the
 * Postgres adapter.
 */
export function searchBody(collection: SearchCollection, query: SearchQuery): { body: Record<string, unknown>; ranked: boolean } | null {
  const text = query.query.trim();
  const translated = text === '' ? undefined : websearchToSimpleQueryString(websearchQueryText(text));
  if (translated === null) return null;
  const matcher =
    translated === undefined
      ? undefined
      : {
          simple_query_string: {
            query: translated,
            fields: [...collection.textFields],
            default_operator: 'and',
            flags: 'AND|OR|NOT|PHRASE|PRECEDENCE|WHITESPACE|ESCAPE',
          },
        };
  const keys = (sort: readonly SortKey[]) => [...sort.map((key) => ({ [sortField(collection, key.field)]: key.order })), { id: 'asc' }];
  const sort = query.sort ? keys(query.sort) : matcher ? [{ _score: 'desc' }, ...keys(collection.order.ranked)] : keys(collection.order.listed);
  return {
    ranked: matcher !== undefined,
    body: {
      from: query.offset,
      size: query.limit,
      track_total_hits: true,
      _source: returnedFields(collection),
      query: { bool: { ...restrictions(collection, query), ...(matcher ? { must: [matcher] } : {}) } },
      sort,
      track_scores: matcher !== undefined,
    },
  };
}

/** The body of a k-NN search: lucene applies the filters inside the HNSW search, so k results come back. */
export function knnBody(collection: SearchCollection, query: KnnQuery): Record<string, unknown> {
  return {
    size: query.k,
    _source: returnedFields(collection),
    query: { knn: { embedding: { vector: query.vector, k: query.k, filter: { bool: restrictions(collection, query) } } } },
  };
}

/** The lucene engine scores cosinesimil as (1 + cosine) / 2: the cosine itself. */
export const cosineOf = (score: number | null) => 2 * Number(score ?? 0) - 1;
