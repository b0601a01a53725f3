import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import type { DocumentUpdate } from '../../src/search/collection.js';
import { concepts, facts, type ConceptDocument, type FactDocument } from '../../src/search/collections/index.js';
import { InvalidSearchRequestError, MAX_RESULT_WINDOW, type KnnQuery, type SearchIndex } from '../../src/search/port.js';

/**
 * The SearchIndex contract, run on every adapter: the Postgres one over PGlite with pgvector
 * (test/search/postgres.test.ts) and OpenSearch (test/search/opensearch.server.test.ts).
 */
export interface SearchHarness {
  index: SearchIndex;
  /**
   * Makes documents searchable the way the service does: on Postgres the facts projection writes
   * the `facts` rows and the search index only the vectors; on OpenSearch indexFacts does it all.
   */
  load(docs: FactDocument[]): Promise<void>;
  /** Removes facts the way the service does (Postgres: the facts row goes with its projection). */
  removeFacts(repositoryId: string, ids: string[]): Promise<void>;
  /** Concepts alike: on Postgres the concepts projection writes the rows and aliases. */
  loadConcepts(docs: ConceptDocument[]): Promise<void>;
  updateConcepts(updates: DocumentUpdate<ConceptDocument>[]): Promise<void>;
  removeConcepts(repositoryId: string, ids: string[]): Promise<void>;
  close(): Promise<void>;
}

export const DIMENSIONS = 4;

let clock = Date.parse('2024-03-01T00:00:00.000Z');

/** A fact with a fresh id and a created_at one second after the previous one made. */
export function fact(repositoryId: string, content: string, extra: Partial<FactDocument> = {}): FactDocument {
  clock += 1000;
  return {
    id: randomUUID(),
    repository_id: repositoryId,
    content,
    content_hash: `hash-${randomUUID()}`,
    fact_kind: 'text',
    status: 'stable',
    created_at: new Date(clock).toISOString(),
    ...extra,
  };
}

/** A concept with a fresh id. */
export function concept(repositoryId: string, canonicalName: string, extra: Partial<ConceptDocument> = {}): ConceptDocument {
  return {
    id: randomUUID(),
    repository_id: repositoryId,
    canonical_name: canonicalName,
    context: 'general',
    aliases: [],
    fact_count: 1,
    status: 'active',
    ...extra,
  };
}

const ids = (items: { id: string }[]) => items.map((item) => item.id);
const sorted = (values: string[]) => [...values].sort();

export function searchContract(t: Test, open: () => Promise<SearchHarness>): void {
  const withHarness = (name: string, body: (t: Test, harness: SearchHarness, repo: string) => Promise<void>) =>
    t.test(name, async (t) => {
      const harness = await open();
      t.teardown(() => harness.close());
      await body(t, harness, `repo-${randomUUID()}`);
    });

  const search = (index: SearchIndex, repositoryId: string, query: string, limit = 50, offset = 0) =>
    index.search(facts, { repositoryId, query, limit, offset });

  withHarness('indexes facts and finds them by stemmed words, with every field', async (t, { index, load }, repo) => {
    const cat = fact(repo, 'Cats sleep most of the day.');
    const dog = fact(repo, 'Dogs need daily walks.', { fact_kind: 'claim', status: 'new' });
    await load([cat, dog]);
    const result = await search(index, repo, 'sleeping cat');
    t.equal(result.total, 1);
    t.same(ids(result.items), [cat.id], 'english stemming: "sleeping cat" finds "Cats sleep"');
    const [hit] = result.items;
    t.match(hit, { id: cat.id, content: cat.content, content_hash: cat.content_hash, fact_kind: 'text', status: 'stable', created_at: cat.created_at });
    t.ok(hit.score > 0, 'a lexical hit has a positive score');
    const walks = await search(index, repo, 'walk');
    t.same(ids(walks.items), [dog.id]);
    t.equal((await search(index, repo, 'giraffe')).total, 0, 'a word no fact has finds nothing');
  });

  withHarness('indexing the same facts again changes nothing', async (t, { index, load }, repo) => {
    const docs = [fact(repo, 'Rivers carry sediment to the sea.'), fact(repo, 'Sediment forms river deltas.')];
    await load(docs);
    const before = await search(index, repo, 'sediment');
    await load(docs);
    await index.index(facts, docs);
    const after = await search(index, repo, 'sediment');
    t.equal(after.total, 2);
    t.same(after, before, 'same hits, same order, same scores');
  });

  withHarness('an earlier created_at wins when a fact is indexed again', async (t, { index, load }, repo) => {
    const first = fact(repo, 'Glaciers retreat in warm summers.', { created_at: '2024-01-01T10:00:00.000Z' });
    await load([first]);
    await load([{ ...first, created_at: '2024-06-01T10:00:00.000Z' }]);
    const [hit] = (await search(index, repo, 'glacier')).items;
    t.equal(hit.created_at, '2024-01-01T10:00:00.000Z');
    t.equal((await search(index, repo, '')).total, 1, 'still one fact');
  });

  withHarness('the better match ranks first', async (t, { index, load }, repo) => {
    const weak = fact(repo, 'The committee discussed many topics, among them budgets, hiring and travel plans, and at the very end briefly mentioned one solar project and its panels.');
    const strong = fact(repo, 'Solar panels convert sunlight into electricity; solar panels on roofs are common.');
    await load([weak, strong]);
    const result = await search(index, repo, 'solar panels');
    t.same(ids(result.items), [strong.id, weak.id]);
    t.ok(result.items[0].score > result.items[1].score, 'scores fall with rank');
  });

  withHarness('quoted phrases, OR and -negation follow websearch syntax', async (t, { index, load }, repo) => {
    const plants = fact(repo, 'Solar power plants are expanding.');
    const companies = fact(repo, 'Power companies oppose solar subsidies.');
    const cats = fact(repo, 'Cats sleep most of the day.');
    const dogs = fact(repo, 'Dogs need daily walks.');
    const both = fact(repo, 'Cats and dogs can live together.');
    await load([plants, companies, cats, dogs, both]);
    t.same(sorted(ids((await search(index, repo, 'solar power')).items)), sorted([plants.id, companies.id]), 'words: all must occur');
    t.same(ids((await search(index, repo, '"solar power"')).items), [plants.id], 'phrase: adjacent, in order');
    t.same(ids((await search(index, repo, '"power solar"')).items), [], 'a phrase in the other order matches nothing here');
    t.same(sorted(ids((await search(index, repo, 'cats or dogs')).items)), sorted([cats.id, dogs.id, both.id]), 'or');
    t.same(sorted(ids((await search(index, repo, 'cats OR dogs')).items)), sorted([cats.id, dogs.id, both.id]), 'OR');
    t.same(ids((await search(index, repo, 'cats dogs')).items), [both.id], 'two words: AND');
    t.same(ids((await search(index, repo, 'cats -dogs')).items), [cats.id], 'negation');
    t.same(sorted(ids((await search(index, repo, '-cats')).items)), sorted([plants.id, companies.id, dogs.id]), 'negation alone: every fact without the word');
    t.same(ids((await search(index, repo, 'solar -"power plants"')).items), [companies.id], 'negated phrase');
    t.same(sorted(ids((await search(index, repo, 'walks or "solar power"')).items)), sorted([dogs.id, plants.id]), 'OR of a word and a phrase');
    t.same(sorted(ids((await search(index, repo, 'sleep cats or walks')).items)), sorted([cats.id, dogs.id]), 'AND binds tighter than OR');
    t.equal((await search(index, repo, 'the')).total, 0, 'stop words alone match nothing');
    t.equal((await search(index, repo, '"" or -')).total, 0, 'operators without terms match nothing');
    t.same(ids((await search(index, repo, 'cats* (dogs)')).items), [both.id], 'other punctuation is no operator');
    // websearch_to_tsquery nests a run of negations and failed past 32 of them ("tsquery stack too small", a 500).
    t.equal((await search(index, repo, '-'.repeat(40))).total, 0, 'a run of signs alone matches nothing');
    t.same(ids((await search(index, repo, `cats ${'-'.repeat(41)}dogs`)).items), [cats.id], 'an odd run negates once');
    t.same(ids((await search(index, repo, `cats ${'- '.repeat(40)}dogs`)).items), [both.id], 'an even run, spaced, negates nothing');
    // A sign with a space after it is a dash: websearch_to_tsquery negated the next term, OpenSearch's translation did not.
    t.same(ids((await search(index, repo, 'cats - dogs')).items), [both.id], 'a dash between words negates nothing');
    t.same(ids((await search(index, repo, `cats ${'- '.repeat(41)}dogs`)).items), [both.id], 'an odd run, spaced, negates nothing either');
    t.same(sorted(ids((await search(index, repo, '- cats -')).items)), sorted([cats.id, both.id]), 'nor a sign before a space or at the end');
    t.same(ids((await search(index, repo, 'cats - -dogs')).items), [cats.id], 'a sign attached to its term still negates');
  });

  withHarness('a query is composed (NFC) as the indexed text is', async (t, { index, load }, repo) => {
    const zurich = fact(repo, 'Z\u00fcrich lies on a lake.');
    const cafe = fact(repo, 'The caf\u00e9 opened early.');
    await load([zurich, cafe]);
    t.same(ids((await search(index, repo, 'Zu\u0308rich')).items), [zurich.id], 'u and a combining diaeresis');
    t.same(ids((await search(index, repo, 'cafe\u0301')).items), [cafe.id], 'e and a combining acute accent');
  });

  withHarness('a repository sees only its own facts', async (t, { index, load }, repo) => {
    const other = `repo-${randomUUID()}`;
    const mine = fact(repo, 'Volcanoes release sulfur dioxide.');
    const theirs = fact(other, 'Volcanoes release sulfur dioxide.');
    await load([mine, theirs]);
    t.same(ids((await search(index, repo, 'volcano')).items), [mine.id]);
    t.same(ids((await search(index, other, 'volcano')).items), [theirs.id]);
    t.same(ids((await search(index, repo, '')).items), [mine.id], 'listing too');
    t.same((await search(index, `repo-${randomUUID()}`, 'volcano')).total, 0, 'an unknown repository has nothing');
  });

  withHarness('pages are disjoint, ordered, and carry the total', async (t, { index, load }, repo) => {
    const docs = Array.from({ length: 7 }, (_, position) => fact(repo, `Fact number ${position + 1} about paging widgets.`));
    await load([...docs].reverse());
    await load([fact(repo, 'Something else entirely.')]);
    const pages = [await search(index, repo, 'widgets', 3, 0), await search(index, repo, 'widgets', 3, 3), await search(index, repo, 'widgets', 3, 6)];
    t.same(pages.map((page) => page.total), [7, 7, 7]);
    t.same(pages.map((page) => page.items.length), [3, 3, 1]);
    t.same(pages.flatMap((page) => ids(page.items)), ids(docs), 'equal scores: oldest first, no fact twice or missing');
    const past = await search(index, repo, 'widgets', 3, 9);
    t.same(past, { total: 7, items: [] }, 'past the last page: no items, still the total');
    const countOnly = await search(index, repo, 'widgets', 0, 0);
    t.same(countOnly, { total: 7, items: [] }, 'limit 0 counts');
    const listing = await search(index, repo, '', 4, 0);
    t.equal(listing.total, 8);
    t.equal(listing.items[0].content, 'Something else entirely.', 'no query: newest first');
    t.ok(listing.items.every((item) => item.score === 0), 'no query: score 0');
    t.same(ids((await search(index, repo, '   ', 3, 5)).items), ids([...docs].reverse().slice(4, 7)), 'blank query pages the listing');
  });

  withHarness('k-NN returns the nearest facts of the repository first', async (t, { index, load }, repo) => {
    const other = `repo-${randomUUID()}`;
    const near = fact(repo, 'Near.', { vector: [1, 0.1, 0, 0] });
    const diagonal = fact(repo, 'Diagonal.', { vector: [1, 1, 0, 0] });
    const orthogonal = fact(repo, 'Orthogonal.', { vector: [0, 1, 0, 0] });
    const opposite = fact(repo, 'Opposite.', { vector: [-1, 0, 0, 0] });
    const unembedded = fact(repo, 'No vector yet.');
    const elsewhere = fact(other, 'Exact match in another repository.', { vector: [1, 0, 0, 0] });
    await load([opposite, orthogonal, near, unembedded, diagonal, elsewhere]);
    const all = await index.knn(facts, { repositoryId: repo, vector: [2, 0, 0, 0], k: 10 });
    t.same(ids(all.items), ids([near, diagonal, orthogonal, opposite]), 'nearest first; no fact without a vector, none of another repository');
    const expected = [1 / Math.sqrt(1.01), 1 / Math.sqrt(2), 0, -1];
    all.items.forEach((item, position) => t.ok(Math.abs(item.score - expected[position]) < 1e-3, `score ${item.score} is the cosine ${expected[position]}`));
    t.match(all.items[0], { content: 'Near.', content_hash: near.content_hash, fact_kind: 'text', status: 'stable', created_at: near.created_at });
    const two = await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 2 });
    t.same(ids(two.items), [near.id, diagonal.id], 'k bounds the answer');
    const theirs = await index.knn(facts, { repositoryId: other, vector: [0, 1, 0, 0], k: 5 });
    t.same(ids(theirs.items), [elsewhere.id]);
    t.same((await index.knn(facts, { repositoryId: `repo-${randomUUID()}`, vector: [1, 0, 0, 0], k: 3 })).items, []);
  });

  withHarness('hidden ids are found by nothing: not lexically, not listed, not by vector, and k of the others come back', async (t, { index, load }, repo) => {
    const near = fact(repo, 'Near wasps.', { vector: [1, 0.1, 0, 0] });
    const diagonal = fact(repo, 'Diagonal wasps.', { vector: [1, 1, 0, 0] });
    const orthogonal = fact(repo, 'Orthogonal wasps.', { vector: [0, 1, 0, 0] });
    await load([near, diagonal, orthogonal]);
    const hide = [near.id];
    t.same(sorted(ids((await index.search(facts, { repositoryId: repo, query: 'wasps', limit: 10, offset: 0, hide })).items)), sorted([diagonal.id, orthogonal.id]), 'lexical');
    const listed = await index.search(facts, { repositoryId: repo, query: '', limit: 10, offset: 0, hide });
    t.same(sorted(ids(listed.items)), sorted([diagonal.id, orthogonal.id]), 'listed');
    t.equal(listed.total, 2, 'and not counted');
    t.equal((await index.search(facts, { repositoryId: repo, query: 'wasps', limit: 0, offset: 0, hide })).total, 2, 'nor in a count alone');
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 2, hide })).items), [diagonal.id, orthogonal.id], 'k-NN: k of the others');
    const [restricted, many] = await index.knnMany(facts, [
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, ids: [near.id, diagonal.id], hide },
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, hide: [near.id, orthogonal.id] },
    ]);
    t.same(ids(restricted.items), [diagonal.id], 'with ids');
    t.same(ids(many.items), [diagonal.id], 'knnMany');
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, hide: [] })).items), [near.id, diagonal.id, orthogonal.id], 'an empty list hides nothing');
    await t.rejects(index.search(facts, { repositoryId: repo, query: '', limit: 1, offset: 0, hide: [''] }), { name: 'InvalidSearchRequestError', message: /hide/ });
  });

  withHarness('knnMany answers each query as knn does, in the order asked', async (t, { index, load }, repo) => {
    const other = `repo-${randomUUID()}`;
    const near = fact(repo, 'Near.', { vector: [1, 0.1, 0, 0] });
    const diagonal = fact(repo, 'Diagonal.', { vector: [1, 1, 0, 0] });
    const orthogonal = fact(repo, 'Orthogonal.', { vector: [0, 1, 0, 0] });
    const picture = fact(repo, 'A picture.', { vector: [1, 0.2, 0, 0], fact_kind: 'image' });
    const elsewhere = fact(other, 'Elsewhere.', { vector: [1, 0, 0, 0] });
    await load([near, diagonal, orthogonal, picture, elsewhere]);
    const queries: KnnQuery<FactDocument>[] = [
      { repositoryId: repo, vector: [0, 1, 0, 0], k: 2 },
      { repositoryId: other, vector: [1, 0, 0, 0], k: 5 },
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, ids: [] },
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3 },
      { repositoryId: `repo-${randomUUID()}`, vector: [1, 0, 0, 0], k: 3 },
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, ids: [orthogonal.id, diagonal.id] },
      { repositoryId: repo, vector: [1, 0, 0, 0], k: 3, filters: { fact_kind: 'image' } },
      { repositoryId: repo, vector: [0, 1, 0, 0], k: 1, filters: { fact_kind: 'text' } },
    ];
    const answers = await index.knnMany(facts, queries);
    t.equal(answers.length, queries.length, 'one answer per query');
    for (const [position, query] of queries.entries()) {
      t.same(answers[position], await index.knn(facts, query), `query ${position} answered as knn answers it`);
    }
    t.same(ids(answers[0].items), [orthogonal.id, diagonal.id]);
    t.same(ids(answers[1].items), [elsewhere.id], 'another repository in the same call');
    t.same(answers[2].items, [], 'an empty id list matches nothing');
    t.same(ids(answers[3].items), [near.id, picture.id, diagonal.id]);
    t.same(ids(answers[5].items), [diagonal.id, orthogonal.id], 'restricted to ids, beside unrestricted queries');
    t.same(ids(answers[6].items), [picture.id], 'filtered, beside unfiltered queries');
    t.same(ids(answers[7].items), [orthogonal.id], 'another filter in the same call');
    t.same(await index.knnMany(facts, []), [], 'no queries, no answers');
    await t.rejects(index.knnMany(facts, [queries[0], { repositoryId: repo, vector: [0, 0, 0, 0], k: 1 }]), 'a bad query fails the call');
  });

  withHarness('k-NN with minScore: of the k nearest, those at least that similar', async (t, { index, load }, repo) => {
    const near = fact(repo, 'Near.', { vector: [1, 0.1, 0, 0] });
    const diagonal = fact(repo, 'Diagonal.', { vector: [1, 1, 0, 0] });
    const orthogonal = fact(repo, 'Orthogonal.', { vector: [0, 1, 0, 0] });
    const opposite = fact(repo, 'Opposite.', { vector: [-1, 0, 0, 0] });
    await load([opposite, orthogonal, near, diagonal]);
    const ask = (minScore: number, k = 10, vector = [1, 0, 0, 0]) => index.knn(facts, { repositoryId: repo, vector, k, minScore });
    t.same(ids((await ask(0.9)).items), [near.id], 'cosine 0.995 passes 0.9, 0.707 does not');
    t.same(ids((await ask(0.7)).items), [near.id, diagonal.id]);
    t.same(ids((await ask(-1e-6)).items), [near.id, diagonal.id, orthogonal.id], 'orthogonal (0) passes just below 0, opposite (-1) does not');
    t.same(ids((await ask(-1)).items), [near.id, diagonal.id, orthogonal.id, opposite.id], '-1: every vector');
    t.same(ids((await ask(0.7, 1)).items), [near.id], 'still at most k');
    t.same((await ask(0.999)).items, [], 'none that close: none');
    t.ok((await ask(0.7)).items.every((item) => item.score >= 0.7), 'every score at or above it');
    const [many, none] = await index.knnMany(facts, [
      { repositoryId: repo, vector: [0, 1, 0, 0], k: 3, minScore: 0.5 },
      { repositoryId: repo, vector: [0, 0, 1, 0], k: 3, minScore: 0.5 },
    ]);
    t.same(ids(many.items), [orthogonal.id, diagonal.id], 'knnMany too, each query with its own');
    t.same(none.items, []);
    await t.rejects(ask(1.5), { name: 'InvalidSearchRequestError', message: 'minScore must be a number from -1 to 1' });
    await t.rejects(ask(Number.NaN), { name: 'InvalidSearchRequestError' });
  });

  withHarness('k-NN with exclude: the k nearest of the others', async (t, { index, load }, repo) => {
    const near = fact(repo, 'Near.', { vector: [1, 0.1, 0, 0] });
    const diagonal = fact(repo, 'Diagonal.', { vector: [1, 1, 0, 0] });
    const orthogonal = fact(repo, 'Orthogonal.', { vector: [0, 1, 0, 0] });
    await load([orthogonal, near, diagonal]);
    const ask = (exclude: string[], k: number, minScore?: number) => index.knn(facts, { repositoryId: repo, vector: [1, 0.1, 0, 0], k, exclude, ...(minScore === undefined ? {} : { minScore }) });
    t.same(ids((await ask([near.id], 2)).items), [diagonal.id, orthogonal.id], 'the nearest left out, still k');
    t.same(ids((await ask([diagonal.id], 1)).items), [near.id], 'an excluded id further away changes nothing nearer');
    t.same(ids((await ask([near.id, 'unknown'], 5)).items), [diagonal.id, orthogonal.id], 'unknown ids are no error');
    t.same((await ask([near.id], 3, 0.9)).items, [], 'with minScore: the only close one excluded, nothing');
    const [first, second] = await index.knnMany(facts, [
      { repositoryId: repo, vector: [0, 1, 0, 0], k: 1, exclude: [orthogonal.id] },
      { repositoryId: repo, vector: [0, 1, 0, 0], k: 1 },
    ]);
    t.same([ids(first.items), ids(second.items)], [[diagonal.id], [orthogonal.id]], 'knnMany: each query its own exclusions');
    // A caller outside TypeScript (an MCP tool's JSON) can send anything.
    await t.rejects(index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1, exclude: [7 as unknown as string] }), { name: 'InvalidSearchRequestError' });
  });

  withHarness('vectors: omitted keeps, null removes, a new one replaces', async (t, { index, load }, repo) => {
    const a = fact(repo, 'Alpha.', { vector: [1, 0, 0, 0] });
    const b = fact(repo, 'Beta.', { vector: [0, 1, 0, 0] });
    await load([a, b]);
    await index.index(facts, [{ ...a, vector: undefined }]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 })).items), [a.id], 'omitted: kept');
    await index.index(facts, [{ ...a, vector: [0, 0, 1, 0] }]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items), [a.id], 'replaced');
    await index.index(facts, [{ ...a, vector: null }]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 5 })).items), [b.id], 'null: removed');
    t.same(ids((await search(index, repo, 'alpha')).items), [a.id], 'the fact itself stays searchable');
  });

  withHarness('removeRepository removes its facts and vectors, and only those', async (t, { index, load }, repo) => {
    const other = `repo-${randomUUID()}`;
    const mine = fact(repo, 'Tides follow the moon.', { vector: [1, 0, 0, 0] });
    const theirs = fact(other, 'Tides follow the moon.', { vector: [1, 0, 0, 0] });
    await load([mine, theirs]);
    await index.removeRepository(repo);
    t.same((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items, [], 'no vectors left');
    t.same(ids((await search(index, other, 'tides')).items), [theirs.id], 'the other repository keeps its facts');
    t.same(ids((await index.knn(facts, { repositoryId: other, vector: [1, 0, 0, 0], k: 5 })).items), [theirs.id]);
    await t.resolves(index.removeRepository(repo), 'removing again is harmless');
    await t.resolves(index.removeRepository(`repo-${randomUUID()}`), 'removing an unknown repository is harmless');
  });

  withHarness('bad requests are refused with InvalidSearchRequestError', async (t, { index, load }, repo) => {
    const bad = { name: 'InvalidSearchRequestError' };
    t.ok(new InvalidSearchRequestError('x') instanceof Error);
    await t.rejects(search(index, repo, 'x', -1), bad, 'negative limit');
    await t.rejects(search(index, repo, 'x', 1.5), bad, 'fractional limit');
    await t.rejects(search(index, repo, 'x', 10, -1), bad, 'negative offset');
    await t.rejects(search(index, repo, 'x', 10, MAX_RESULT_WINDOW), bad, 'past the result window');
    await t.rejects(search(index, '', 'x'), bad, 'no repository');
    await t.rejects(index.search(facts, { repositoryId: repo, query: 42 as unknown as string, limit: 1, offset: 0 }), bad, 'query not a string');
    const vectorQuery = { repositoryId: repo, vector: [1, 0, 0, 0], k: 3 };
    await t.rejects(index.knn(facts, { ...vectorQuery, k: 0 }), bad, 'k 0');
    await t.rejects(index.knn(facts, { ...vectorQuery, k: 100_000 }), bad, 'k too large');
    await t.rejects(index.knn(facts, { ...vectorQuery, vector: [1, 0, 0] }), bad, 'wrong dimension');
    await t.rejects(index.knn(facts, { ...vectorQuery, vector: [0, 0, 0, 0] }), bad, 'zero vector');
    await t.rejects(index.knn(facts, { ...vectorQuery, vector: [1, Number.NaN, 0, 0] }), bad, 'NaN');
    await t.rejects(index.removeRepository(''), bad, 'removing no repository');

    const good = fact(repo, 'Good fact about lighthouses.', { vector: [1, 0, 0, 0] });
    const invalidBatches: [string, FactDocument[]][] = [
      ['missing id', [good, { ...fact(repo, 'x'), id: '' }]],
      ['bad created_at', [good, { ...fact(repo, 'x'), created_at: 'yesterday' }]],
      ['wrong vector dimension', [good, fact(repo, 'x', { vector: [1, 2] })]],
      ['zero vector', [good, fact(repo, 'x', { vector: [0, 0, 0, 0] })]],
      ['the same id twice', [good, { ...good }]],
    ];
    for (const [what, batch] of invalidBatches) await t.rejects(index.index(facts, batch), bad, what);
    t.same((await index.knn(facts, vectorQuery)).items, [], 'a refused batch wrote nothing');
    await load([good]);
    t.same(ids((await search(index, repo, 'lighthouse')).items), [good.id], 'the index still works');
    await t.resolves(index.index(facts, []), 'an empty batch is fine');
  });

  withHarness('merged facts are never found, by words, listing or vector', async (t, { index, load }, repo) => {
    const stable = fact(repo, 'Comets have icy nuclei.', { vector: [1, 0, 0, 0] });
    const fresh = fact(repo, 'Comets grow tails near the sun.', { status: 'new', vector: [0.9, 0.1, 0, 0] });
    const merged = fact(repo, 'Comets have icy cores.', { status: 'merged', vector: [1, 0.01, 0, 0] });
    await load([stable, fresh, merged]);
    t.same(sorted(ids((await search(index, repo, 'comets')).items)), sorted([stable.id, fresh.id]), 'lexical');
    t.equal((await search(index, repo, '')).total, 2, 'listing');
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [stable.id, fresh.id], 'k-NN');
  });

  withHarness('ids restrict lexical and vector search to a set', async (t, { index, load }, repo) => {
    const a = fact(repo, 'Bees pollinate apple trees.', { vector: [1, 0, 0, 0] });
    const b = fact(repo, 'Bees make honey from nectar.', { vector: [0.9, 0.2, 0, 0] });
    const c = fact(repo, 'Bees dance to share directions.', { vector: [0.8, 0.3, 0, 0] });
    await load([a, b, c]);
    const chosen = [a.id, c.id];
    const lexical = await index.search(facts, { repositoryId: repo, query: 'bees', limit: 10, offset: 0, ids: chosen });
    t.equal(lexical.total, 2);
    t.same(sorted(ids(lexical.items)), sorted(chosen));
    t.same(sorted(ids((await index.search(facts, { repositoryId: repo, query: '', limit: 10, offset: 0, ids: chosen })).items)), sorted(chosen), 'listing too');
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5, ids: [b.id, c.id] })).items), [b.id, c.id]);
    t.same(await index.search(facts, { repositoryId: repo, query: 'bees', limit: 10, offset: 0, ids: [] }), { total: 0, items: [] }, 'an empty set matches nothing');
    t.same((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5, ids: [] })).items, []);
    await t.rejects(index.search(facts, { repositoryId: repo, query: 'x', limit: 1, offset: 0, ids: [''] }), { name: 'InvalidSearchRequestError' });
  });

  withHarness('an id set of any size restricts search: more ids than a statement has parameters or a terms query values', async (t, { index, load }, repo) => {
    // A concept or context linking 70,000 facts: each id a parameter was past PostgreSQL's 65,535 (a 500).
    const a = fact(repo, 'Wasps build paper nests.', { vector: [1, 0, 0, 0] });
    const b = fact(repo, 'Wasps hunt caterpillars.', { vector: [0.9, 0.2, 0, 0] });
    await load([a, b]);
    const many = [...Array.from({ length: 70_000 }, () => randomUUID()), a.id];
    const lexical = await index.search(facts, { repositoryId: repo, query: 'wasps', limit: 10, offset: 0, ids: many });
    t.same({ total: lexical.total, ids: ids(lexical.items) }, { total: 1, ids: [a.id] }, 'lexical');
    t.same(ids((await index.search(facts, { repositoryId: repo, query: '', limit: 10, offset: 0, ids: many })).items), [a.id], 'listing');
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5, ids: many })).items), [a.id], 'k-NN');
  });

  withHarness('updateFacts sets and removes vectors of indexed facts', async (t, { index, load }, repo) => {
    const a = fact(repo, 'Owls hunt at night.');
    const b = fact(repo, 'Hawks hunt by day.', { vector: [0, 1, 0, 0] });
    await load([a, b]);
    await index.update(facts, [{ id: a.id, repository_id: repo, vector: [1, 0, 0, 0] }]);
    await index.update(facts, [{ id: a.id, repository_id: repo, vector: [1, 0, 0, 0] }]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 })).items), [a.id], 'set, twice');
    await index.update(facts, [{ id: b.id, repository_id: repo, vector: null }]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [0, 1, 0, 0], k: 5 })).items), [a.id], 'null removes');
    t.same(ids((await search(index, repo, 'hawks')).items), [b.id], 'the text stays');
    await t.rejects(index.update(facts, [{ id: a.id, repository_id: repo, vector: [1, 0] }]), { name: 'InvalidSearchRequestError' });
    await t.resolves(index.update(facts, []));
  });

  withHarness('removeFacts removes facts and their vectors, idempotently', async (t, { index, load, removeFacts }, repo) => {
    const a = fact(repo, 'Moss grows on north sides.', { vector: [1, 0, 0, 0] });
    const b = fact(repo, 'Moss needs moisture.', { vector: [1, 0.1, 0, 0] });
    await load([a, b]);
    await removeFacts(repo, [a.id]);
    t.same(ids((await search(index, repo, 'moss')).items), [b.id]);
    t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [b.id]);
    await t.resolves(index.remove(facts, repo, [a.id, 'unknown-id']), 'removing again, or an unknown id, is harmless');
    await t.resolves(index.remove(facts, repo, []));
    await t.rejects(index.remove(facts, '', [a.id]), { name: 'InvalidSearchRequestError' });
  });

  withHarness('concepts are found by canonical name or alias; merged ones never', async (t, harness, repo) => {
    const { index, loadConcepts } = harness;
    const photosynthesis = concept(repo, 'photosynthesis', { aliases: ['light reactions', 'carbon fixation'], fact_count: 7 });
    const chlorophyll = concept(repo, 'chlorophyll', { context: 'molecule', fact_count: 2 });
    const merged = concept(repo, 'old photosynthesis', { status: 'merged' });
    const elsewhere = concept(`repo-${randomUUID()}`, 'photosynthesis');
    await loadConcepts([photosynthesis, chlorophyll, merged, elsewhere]);
    const byName = await index.search(concepts, { repositoryId: repo, query: 'photosynthesis', limit: 10, offset: 0 });
    t.equal(byName.total, 1);
    t.match(byName.items[0], { id: photosynthesis.id, canonical_name: 'photosynthesis', context: 'general', fact_count: 7, status: 'active' });
    t.same(sorted(byName.items[0].aliases), ['carbon fixation', 'light reactions']);
    t.ok(byName.items[0].score > 0);
    t.same(ids((await index.search(concepts, { repositoryId: repo, query: 'light', limit: 10, offset: 0 })).items), [photosynthesis.id], 'by an alias word');
    t.same(ids((await index.search(concepts, { repositoryId: repo, query: '"carbon fixation"', limit: 10, offset: 0 })).items), [photosynthesis.id], 'by an alias phrase');
    t.same(ids((await index.search(concepts, { repositoryId: repo, query: 'chlorophyll or carbon', limit: 10, offset: 0 })).items).length, 2, 'or');
    const listing = await index.search(concepts, { repositoryId: repo, query: '', limit: 10, offset: 0 });
    t.same(ids(listing.items), [chlorophyll.id, photosynthesis.id], 'listing: by name, merged hidden');
    t.same(await index.search(concepts, { repositoryId: repo, query: '', limit: 1, offset: 5 }), { total: 2, items: [] }, 'past the last page');
    t.same(ids((await index.search(concepts, { repositoryId: repo, query: '', limit: 10, offset: 0, ids: [photosynthesis.id] })).items), [photosynthesis.id], 'conceptIds');
    t.same((await index.search(concepts, { repositoryId: repo, query: '', limit: 10, offset: 0, ids: [] })).total, 0);
    await t.rejects(index.search(concepts, { repositoryId: repo, query: 'x', limit: -1, offset: 0 }), { name: 'InvalidSearchRequestError' });
  });

  withHarness('concept k-NN, alias updates and removals', async (t, harness, repo) => {
    const { index, loadConcepts, updateConcepts, removeConcepts } = harness;
    const river = concept(repo, 'river', { vector: [1, 0, 0, 0] });
    const stream = concept(repo, 'stream', { vector: [0.9, 0.3, 0, 0] });
    const merged = concept(repo, 'brook', { status: 'merged', vector: [1, 0, 0, 0] });
    const mountain = concept(repo, 'mountain');
    await loadConcepts([river, stream, merged, mountain]);
    t.same(ids((await index.knn(concepts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [river.id, stream.id], 'nearest first, merged and unembedded left out');
    const [nearest] = (await index.knn(concepts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 })).items;
    t.ok(Math.abs(nearest.score - 1) < 1e-3, 'score is the cosine');
    t.same(ids((await index.knn(concepts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5, ids: [stream.id] })).items), [stream.id]);
    await index.update(concepts, [{ id: mountain.id, repository_id: repo, vector: [0, 0, 1, 0] }]);
    t.same(ids((await index.knn(concepts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items), [mountain.id], 'a vector added later');

    await updateConcepts([{ id: mountain.id, repository_id: repo, addTo: { aliases: ['Summit', 'peak'] } }]);
    await updateConcepts([{ id: mountain.id, repository_id: repo, addTo: { aliases: ['summit'] } }]);
    const bySummit = await index.search(concepts, { repositoryId: repo, query: 'summit', limit: 5, offset: 0 });
    t.same(ids(bySummit.items), [mountain.id], 'found by a new alias');
    t.same(sorted(bySummit.items[0].aliases), ['Summit', 'peak'], 'an alias differing only in case is not added twice');
    await updateConcepts([{ id: mountain.id, repository_id: repo, removeFrom: { aliases: ['SUMMIT'] } }]);
    t.same((await index.search(concepts, { repositoryId: repo, query: 'summit', limit: 5, offset: 0 })).total, 0, 'removed alias no longer finds it');
    t.same(ids((await index.search(concepts, { repositoryId: repo, query: 'peak', limit: 5, offset: 0 })).items), [mountain.id]);

    await removeConcepts(repo, [river.id]);
    t.same(ids((await index.knn(concepts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [stream.id, mountain.id], 'removed concept');
    t.same((await index.search(concepts, { repositoryId: repo, query: 'river', limit: 5, offset: 0 })).total, 0);
    await t.resolves(index.remove(concepts, repo, [river.id]), 'again: harmless');
    await index.removeRepository(repo);
    t.same((await index.knn(concepts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items, [], 'removeRepository takes concept vectors too');
    await t.rejects(index.knn(concepts, { repositoryId: repo, vector: [0, 0, 0, 0], k: 1 }), { name: 'InvalidSearchRequestError' });
    await t.rejects(index.index(concepts, [{ ...concept(repo, 'x'), canonical_name: '' }]), { name: 'InvalidSearchRequestError' });
  });
}
