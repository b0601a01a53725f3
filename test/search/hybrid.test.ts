import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { createHybridSearch, reciprocalRankFusion, type HybridSettings } from '../../src/search/hybrid.js';
import { createPostgresSearchIndex } from '../../src/search/postgres.js';
import type { Embedder } from '../../src/providers/embeddings/port.js';
import type { Database } from '../../src/db/database.js';
import { concepts, facts, summaries } from '../../src/search/collections/index.js';
import type { SearchIndex } from '../../src/search/port.js';
import { concept, DIMENSIONS, fact } from './contract.js';

import { postgresHarnessOver } from './helpers.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

/**
 * A hand-made embedder of four "meanings": vehicles, animals, weather, and a small constant so
 * no vector is all zeros. Synonyms share a dimension, so a paraphrase is near in vector space
 * while sharing no word with the text.
 */
const meanings: Record<string, number> = {
  car: 0, cars: 0, automobile: 0, automobiles: 0, vehicle: 0, vehicles: 0, engine: 0,
  dog: 1, dogs: 1, puppy: 1, puppies: 1, canine: 1, hound: 1,
  rain: 2, storm: 2, weather: 2, drizzle: 2,
};
const handMadeEmbedder: Embedder = {
  modelId: 'hand-made-4d',
  dimensions: DIMENSIONS,
  async embed(texts) {
    return texts.map((text) => {
      const vector = [0, 0, 0, 0.05];
      for (const word of text.toLowerCase().match(/[a-z]+/g) ?? []) {
        const dimension = meanings[word];
        if (dimension !== undefined) vector[dimension] += 1;
      }
      return vector;
    });
  },
};

const defaults: HybridSettings = { enabled: true, rrfK: 60, minScore: 0, overFetchMultiplier: 3 };

async function setup(t: Test) {
  const db: Database = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const harness = postgresHarnessOver(db, index);
  const repo = `repo-${randomUUID()}`;
  const embedFacts = async (contents: string[]) => {
    const vectors = await handMadeEmbedder.embed(contents);
    const docs = contents.map((content, position) => fact(repo, content, { vector: vectors[position] }));
    await harness.load(docs);
    return docs;
  };
  return { db, index, harness, repo, embedFacts };
}

const ids = (items: { id: string }[]) => items.map((item) => item.id);

t.test('reciprocal rank fusion adds 1 / (k + rank) per list', async (t) => {
  const fused = reciprocalRankFusion([[{ id: 'a' }, { id: 'b' }, { id: 'c' }], [{ id: 'c' }, { id: 'd' }]], 60);
  t.same(fused.map((entry) => entry.id), ['c', 'a', 'b', 'd']);
  t.equal(fused[0].score, 1 / 63 + 1 / 61, 'in both lists: the sum');
  t.equal(fused[1].score, 1 / 61);
  t.equal(fused[2].score, 1 / 62);
  t.equal(fused[3].score, 1 / 62, 'b and d tie; the lexical (first) list wins the tie');
  t.same(reciprocalRankFusion([[{ id: 'x' }, { id: 'x' }]], 0), [{ id: 'x', score: 1 }], 'an id twice in one list counts once');
  t.same(reciprocalRankFusion([[], []], 60), []);
});

t.test('hybrid finds a paraphrase only the vector side knows, with fused scores', async (t) => {
  const { index, repo, embedFacts } = await setup(t);
  const [automobile, dogs, cars] = await embedFacts([
    'The automobile needs fuel to run.',
    'Dogs bark at strangers.',
    'Cars and rain make roads slippery.',
  ]);
  const hybrid = createHybridSearch({ search: index, embedder: handMadeEmbedder, settings: defaults });
  const lexicalOnly = await index.search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 });
  t.same(ids(lexicalOnly.items), [cars.id], 'lexically, "car" finds only the fact with the word');

  const reply = await hybrid.search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 });
  t.equal(reply.mode, 'hybrid');
  t.equal(reply.fallback_reason, null);
  t.ok(ids(reply.items).includes(automobile.id), 'the paraphrase "automobile" is found through its vector');
  t.equal(reply.items[0].id, cars.id, 'the fact in both rankings comes first');
  t.equal(reply.items[0].score, 1 / 61 + 1 / 62, 'lexical rank 1 + vector rank 2');
  const automobileHit = reply.items.find((item) => item.id === automobile.id)!;
  t.equal(automobileHit.score, 1 / 61, 'vector rank 1 only');
  t.equal(automobileHit.content, automobile.content, 'hits carry the fact fields');
  t.equal(reply.total, 3, 'every fact with a vector is a candidate');
  t.equal(reply.items[2].id, dogs.id, 'the unrelated fact ranks last');

  const strict = createHybridSearch({ search: index, embedder: handMadeEmbedder, settings: { ...defaults, minScore: 1 / 61 + 0.0001 } });
  const filtered = await strict.search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 });
  t.same(ids(filtered.items), [cars.id], 'min_score drops the results found by one side only');
  t.equal(filtered.total, 1);

  const lexical = await hybrid.search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0, mode: 'lexical' });
  t.same({ mode: lexical.mode, fallback_reason: lexical.fallback_reason, ids: ids(lexical.items) }, { mode: 'lexical', fallback_reason: null, ids: [cars.id] }, 'mode lexical asked for: no fallback reason');
  await t.rejects(hybrid.search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0, mode: 'fuzzy' as 'hybrid' }), { name: 'InvalidSearchRequestError' });
  await t.rejects(hybrid.search(facts, { repositoryId: repo, query: 'car', limit: -1, offset: 0 }), { name: 'InvalidSearchRequestError' });
});

t.test('hybrid pages over the fused list and honours factIds on both sides', async (t) => {
  const { index, repo, embedFacts } = await setup(t);
  const docs = await embedFacts([
    'A puppy chewed the shoe.',
    'The hound tracked a scent.',
    'Dogs need walks.',
    'Canine teeth are sharp.',
    'Rain fell all day.',
  ]);
  const hybrid = createHybridSearch({ search: index, embedder: handMadeEmbedder, settings: defaults });
  const all = await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 5, offset: 0 });
  const pages = [
    await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 2, offset: 0 }),
    await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 2, offset: 2 }),
    await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 2, offset: 4 }),
  ];
  t.same(pages.flatMap((page) => ids(page.items)), ids(all.items), 'pages are slices of one fused order');
  t.same(pages.map((page) => page.total), [all.total, all.total, all.total]);
  const chosen = [docs[0].id, docs[4].id];
  const restricted = await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 10, offset: 0, ids: chosen });
  t.same(ids(restricted.items).sort(), [...chosen].sort(), 'only the given facts, from either side');
  const none = await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 10, offset: 0, ids: [] });
  t.same(none.items, []);
  const count = await hybrid.search(facts, { repositoryId: repo, query: 'dogs', limit: 0, offset: 0 });
  t.same({ total: count.total, items: count.items }, { total: all.total, items: [] }, 'limit 0 counts');
});

t.test('hybrid falls back to lexical and says why', async (t) => {
  const { db, index, repo, embedFacts } = await setup(t);
  const [automobile, cars] = await embedFacts(['The automobile needs fuel.', 'Cars need fuel.']);
  const expectLexical = async (search: SearchIndex, settings: HybridSettings, embedder: Embedder | null, query: string, reason: RegExp) => {
    const reply = await createHybridSearch({ search, embedder, settings }).search(facts, { repositoryId: repo, query, limit: 10, offset: 0 });
    t.equal(reply.mode, 'lexical');
    t.match(reply.fallback_reason, reason);
    return reply;
  };
  const disabled = await expectLexical(index, { ...defaults, enabled: false }, handMadeEmbedder, 'car', /disabled/);
  t.same(ids(disabled.items), [cars.id], 'lexical answers: no paraphrase');
  await expectLexical(index, defaults, null, 'car', /no embedding provider/);
  const withoutVectors = createPostgresSearchIndex(db.knex, { hasVector: false, vectorDimensions: DIMENSIONS });
  await expectLexical(withoutVectors, defaults, handMadeEmbedder, 'car', /vector search is unavailable/);
  const listing = await expectLexical(index, defaults, handMadeEmbedder, '  ', /empty/);
  t.same(ids(listing.items).sort(), [automobile.id, cars.id].sort(), 'an empty query lists');
  const failing: Embedder = { ...handMadeEmbedder, embed: async () => Promise.reject(new Error('model offline')) };
  await expectLexical(index, defaults, failing, 'car', /embedding the query failed: model offline/);
  const wrongSize: Embedder = { ...handMadeEmbedder, dimensions: 3, embed: async () => [[1, 0, 0]] };
  await expectLexical(index, defaults, wrongSize, 'car', /does not fit the index/);
  const deep = await createHybridSearch({ search: index, embedder: handMadeEmbedder, settings: defaults }).search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 995 });
  t.match(deep, { mode: 'lexical', fallback_reason: /past result 1000/ }, 'a page deeper than hybrid ranks');
  t.throws(() => createHybridSearch({ search: index, embedder: null, settings: { ...defaults, overFetchMultiplier: 0 } }), RangeError);
  t.throws(() => createHybridSearch({ search: index, embedder: null, settings: { ...defaults, rrfK: -1 } }), RangeError);
});

t.test('a collection without vectors answers lexically without embedding the query', async (t) => {
  const { index, repo } = await setup(t);
  let embedded = 0;
  const counting: Embedder = { ...handMadeEmbedder, embed: async (texts) => ((embedded += texts.length), handMadeEmbedder.embed(texts)) };
  const hybrid = createHybridSearch({ search: index, embedder: counting, settings: defaults });
  const query = { repositoryId: repo, query: 'car', limit: 10, offset: 0 };
  t.match(await hybrid.search(summaries, query), { mode: 'lexical', fallback_reason: 'the summaries collection keeps no vectors' });
  t.match(await hybrid.searchMany(summaries, [query]), [{ mode: 'lexical', fallback_reason: 'the summaries collection keeps no vectors' }]);
  t.equal(embedded, 0, 'no embedding call for a k-NN that cannot be asked');
  const down: Embedder = { ...handMadeEmbedder, embed: async () => Promise.reject(new Error('model offline')) };
  const reply = await createHybridSearch({ search: index, embedder: down, settings: defaults }).search(summaries, query);
  t.equal(reply.fallback_reason, 'the summaries collection keeps no vectors', 'the reason is the collection, not a provider it never needed');
  t.match(await hybrid.search(summaries, { ...query, query: '' }), { fallback_reason: /the query is empty/ }, 'a listing says so first, as for any collection');
});

t.test('the query is embedded and its k-NN asked while the lexical side is still running', async (t) => {
  const { index, repo, embedFacts } = await setup(t);
  const [automobile, cars] = await embedFacts(['The automobile needs fuel.', 'Cars need fuel.']);
  // The lexical answer is held until the k-NN is asked: hybrid search that asked for the k-NN only
  // after the lexical answer would see it held. So that such a search fails instead of hanging,
  // the hold also ends when the query's embedding came back and every continuation of it ran
  // (a turn of the event loop) without the k-NN asked, or when the query was not even being
  // embedded by the time the lexical answer came. Events, not a timer: a timer of two seconds
  // ran out for a process stalled that long, and the search, correct, failed.
  let knnAsked!: () => void;
  let knnWasAsked = false;
  const asked = new Promise<void>((resolve) => (knnAsked = resolve));
  let embedding: Promise<unknown> | null = null;
  const watchedEmbedder: Embedder = {
    ...handMadeEmbedder,
    embed(texts) {
      const vectors = handMadeEmbedder.embed(texts);
      embedding = vectors;
      return vectors;
    },
  };
  const order: string[] = [];
  const watched: SearchIndex = {
    ...index,
    async search(collection, query) {
      const answer = await index.search(collection, query);
      const embedded = embedding;
      const notAsked =
        embedded === null
          ? Promise.resolve('the query not being embedded')
          : embedded.then(() => new Promise<string>((resolve) => setImmediate(() => resolve('the embedding, no k-NN asked'))));
      const first = knnWasAsked ? 'knn' : await Promise.race([asked.then(() => 'knn'), notAsked]);
      order.push(`lexical answered after ${first}`);
      return answer;
    },
    async knn(collection, query) {
      knnWasAsked = true;
      knnAsked();
      order.push('knn asked');
      return index.knn(collection, query);
    },
  };
  const reply = await createHybridSearch({ search: watched, embedder: watchedEmbedder, settings: defaults }).search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 });
  t.same(order, ['knn asked', 'lexical answered after knn']);
  t.equal(reply.mode, 'hybrid');
  t.same(ids(reply.items).sort(), [automobile.id, cars.id].sort(), 'both sides fused as before');
  // A lexical side that fails fails the search, embedding and k-NN notwithstanding.
  const failing: SearchIndex = { ...index, search: async () => Promise.reject(new Error('lexical broke')) };
  await t.rejects(createHybridSearch({ search: failing, embedder: handMadeEmbedder, settings: defaults }).search(facts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 }), /lexical broke/);
});

t.test('hybrid concept search: a synonym found by vector, filters by conceptIds', async (t) => {
  const { index, harness, repo } = await setup(t);
  const [vehicleVector, animalVector] = await handMadeEmbedder.embed(['automobile', 'hound']);
  const vehicle = concept(repo, 'automobile', { vector: vehicleVector, aliases: ['motor car'] });
  const animal = concept(repo, 'hound', { vector: animalVector });
  await harness.loadConcepts([vehicle, animal]);
  const hybrid = createHybridSearch({ search: index, embedder: handMadeEmbedder, settings: defaults });
  const byVector = await hybrid.search(concepts, { repositoryId: repo, query: 'vehicle', limit: 10, offset: 0 });
  t.equal(byVector.mode, 'hybrid');
  t.equal(byVector.items[0].id, vehicle.id, '"vehicle" finds "automobile" by meaning');
  const both = await hybrid.search(concepts, { repositoryId: repo, query: 'car', limit: 10, offset: 0 });
  t.equal(both.items[0].id, vehicle.id, 'alias word and vector agree');
  t.equal(both.items[0].score, 2 / 61);
  const filtered = await hybrid.search(concepts, { repositoryId: repo, query: 'vehicle', limit: 10, offset: 0, ids: [animal.id] });
  t.same(ids(filtered.items), [animal.id]);
  const lexical = await hybrid.search(concepts, { repositoryId: repo, query: 'vehicle', limit: 10, offset: 0, mode: 'lexical' });
  t.same(lexical, { mode: 'lexical', fallback_reason: null, total: 0, items: [], similarities: new Map() });
});

t.test('a query vector given by the caller is used as is; the k-NN cosines come with the reply', async (t) => {
  const { index, harness, repo } = await setup(t);
  const [vehicleVector, animalVector] = await handMadeEmbedder.embed(['automobile', 'hound']);
  const vehicle = concept(repo, 'automobile', { vector: vehicleVector });
  const animal = concept(repo, 'hound', { vector: animalVector });
  await harness.loadConcepts([vehicle, animal]);
  let embedded = 0;
  const counting = { ...handMadeEmbedder, embed: async (texts: readonly string[]) => ((embedded += texts.length), handMadeEmbedder.embed(texts)) };
  const hybrid = createHybridSearch({ search: index, embedder: counting, settings: defaults });
  // The words say "hound", the given vector says "automobile": the vector side follows the vector.
  const reply = await hybrid.search(concepts, { repositoryId: repo, query: 'hound', limit: 10, offset: 0, vector: vehicleVector });
  t.equal(embedded, 0, 'the query was not embedded');
  t.ok(Math.abs((reply.similarities.get(vehicle.id) ?? 0) - 1) < 1e-6, 'cosine 1 to the vector given');
  t.ok((reply.similarities.get(animal.id) ?? 1) < 0.5, 'and low to the other');
});

t.test('searchMany answers each query as search does, with one embedding call and one k-NN call', async (t) => {
  const { index, repo, embedFacts } = await setup(t);
  await embedFacts(['The automobile needs fuel to run.', 'Dogs bark at strangers.', 'Cars and rain make roads slippery.', 'A storm is coming.']);
  const calls = { embed: 0, knnMany: 0, knn: 0 };
  const counting = { ...handMadeEmbedder, embed: async (texts: readonly string[]) => ((calls.embed += 1), handMadeEmbedder.embed(texts)) };
  const countingIndex = {
    ...index,
    knn: ((collection, query) => ((calls.knn += 1), index.knn(collection, query))) as typeof index.knn,
    knnMany: ((collection, queries) => ((calls.knnMany += 1), index.knnMany(collection, queries))) as typeof index.knnMany,
  };
  const hybrid = createHybridSearch({ search: countingIndex, embedder: counting, settings: defaults });
  const [dogVector] = await handMadeEmbedder.embed(['puppy']);
  const queries = [
    { repositoryId: repo, query: 'car', limit: 10, offset: 0 },
    { repositoryId: repo, query: 'weather', limit: 2, offset: 0 },
    { repositoryId: repo, query: 'car', limit: 10, offset: 0, mode: 'lexical' as const },
    { repositoryId: repo, query: '', limit: 10, offset: 0 },
    { repositoryId: repo, query: 'strangers', limit: 10, offset: 0, vector: dogVector },
  ];
  const many = await hybrid.searchMany(facts, queries);
  t.same(calls, { embed: 1, knnMany: 1, knn: 0 }, 'the two queries without a vector embedded together; one k-NN call');
  for (const [position, query] of queries.entries()) t.same(many[position], await hybrid.search(facts, query), `query ${position} as search answers it`);
  t.same(many.map((reply) => reply.mode), ['hybrid', 'hybrid', 'lexical', 'lexical', 'hybrid']);
  t.same(await hybrid.searchMany(facts, []), []);

  const failing = createHybridSearch({
    search: index,
    embedder: { ...handMadeEmbedder, embed: async () => Promise.reject(new Error('model down')) },
    settings: defaults,
  });
  const fallen = await failing.searchMany(facts, queries.slice(0, 2));
  t.same(fallen.map((reply) => [reply.mode, reply.fallback_reason]), [
    ['lexical', 'embedding the query failed: model down'],
    ['lexical', 'embedding the query failed: model down'],
  ]);
});

t.test('nearestMany: the k nearest by cosine alone, no lexical work; lexical where vectors cannot answer', async (t) => {
  const { db, index, repo, embedFacts } = await setup(t);
  const [automobile, , cars] = await embedFacts(['The automobile needs fuel to run.', 'Dogs bark at strangers.', 'Cars and rain make roads slippery.', 'A storm is coming.']);
  const calls = { embed: 0, knnMany: 0, search: 0 };
  const counting = { ...handMadeEmbedder, embed: async (texts: readonly string[]) => ((calls.embed += 1), handMadeEmbedder.embed(texts)) };
  const countingIndex = {
    ...index,
    search: ((collection, query) => ((calls.search += 1), index.search(collection, query))) as typeof index.search,
    knnMany: ((collection, queries) => ((calls.knnMany += 1), index.knnMany(collection, queries))) as typeof index.knnMany,
  };
  const hybrid = createHybridSearch({ search: countingIndex, embedder: counting, settings: defaults });
  const queries = [
    { repositoryId: repo, query: 'zzz', vectorText: 'car', limit: 2, offset: 0 },
    { repositoryId: repo, query: 'weather', limit: 1, offset: 0 },
  ];
  const [car, weather] = await hybrid.nearestMany(facts, queries);
  t.same(calls, { embed: 1, knnMany: 1, search: 0 }, 'one embedding call, one k-NN call, no lexical search');
  const [carVector] = await handMadeEmbedder.embed(['car']);
  // Ranked as deep as hybrid ranks (limit × over_fetch_multiplier), the page is the first `limit`.
  const ranked = (await index.knn(facts, { repositoryId: repo, vector: carVector, k: 2 * defaults.overFetchMultiplier })).items;
  t.same(car.items, ranked.slice(0, 2), 'the nearest, with their cosine as score');
  t.same(ids(car.items).sort(), [automobile.id, cars.id].sort(), 'found by meaning although the lexical query matches nothing');
  t.same([...car.similarities.entries()], ranked.map((hit) => [hit.id, hit.score]), 'the cosine of every candidate ranked');
  t.match(car, { mode: 'hybrid', fallback_reason: null, total: ranked.length });
  t.equal(weather.items.length, 1);

  const withoutVectors = createHybridSearch({ search: createPostgresSearchIndex(db.knex, { hasVector: false, vectorDimensions: DIMENSIONS }), embedder: handMadeEmbedder, settings: defaults });
  const [fallen] = await withoutVectors.nearestMany(facts, [{ repositoryId: repo, query: 'cars', limit: 5, offset: 0 }]);
  t.match(fallen, { mode: 'lexical', fallback_reason: /vector search is unavailable/ });
  t.same(ids(fallen.items), [cars.id], 'the lexical side answers instead');
});

t.test('the vector side honours exclusions and needs a word to look for', async (t) => {
  const { index, repo, embedFacts } = await setup(t);
  const [puppy, dogs, bigDogs, rain] = await embedFacts(['A puppy chewed the shoe.', 'Dogs need walks.', 'Big dogs guard the puppy.', 'Rain fell all day.']);
  const embedded: string[] = [];
  const recording: Embedder = { ...handMadeEmbedder, embed: async (texts) => (embedded.push(...texts), handMadeEmbedder.embed(texts)) };
  const hybrid = createHybridSearch({ search: index, embedder: recording, settings: defaults });

  // "dogs" is nearest to "puppy" by meaning, but the query excludes it: neither side may bring it back.
  const excluding = await hybrid.search(facts, { repositoryId: repo, query: 'puppy -dogs', limit: 10, offset: 0 });
  t.match(excluding, { mode: 'hybrid', fallback_reason: null });
  t.notOk(ids(excluding.items).includes(dogs.id), 'a fact holding an excluded word is not found by meaning');
  t.notOk(ids(excluding.items).includes(bigDogs.id), 'nor one that also holds a wanted word');
  t.same(ids(excluding.items).slice(0, 1), [puppy.id]);
  t.ok(ids(excluding.items).includes(rain.id), 'the other facts are still ranked by meaning');
  t.same(embedded, ['puppy'], 'the words looked for are embedded, not the excluded one');
  const phrase = await hybrid.search(facts, { repositoryId: repo, query: 'puppy -"big dogs"', limit: 10, offset: 0 });
  t.ok(ids(phrase.items).includes(dogs.id) && !ids(phrase.items).includes(bigDogs.id), 'an excluded phrase leaves out the facts holding it only');
  const [many] = await hybrid.searchMany(facts, [{ repositoryId: repo, query: 'puppy -dogs', limit: 10, offset: 0 }]);
  t.same(many, excluding, 'searchMany answers it as search does');
  const [nearest] = await hybrid.nearestMany(facts, [{ repositoryId: repo, query: 'puppy -dogs', limit: 10, offset: 0 }]);
  t.notOk(ids(nearest.items).includes(dogs.id), 'nearestMany too');

  embedded.length = 0;
  for (const query of ['-dogs', '-', '!!!', '"" or ()', '- -dogs']) {
    const reply = await hybrid.search(facts, { repositoryId: repo, query, limit: 10, offset: 0 });
    const lexical = await index.search(facts, { repositoryId: repo, query, limit: 10, offset: 0 });
    t.match(reply, { mode: 'lexical', fallback_reason: /names no word to look for/ }, `${query}: lexical answers`);
    t.same(ids(reply.items), ids(lexical.items), `${query}: as lexical search answers it`);
  }
  t.same(embedded, [], 'nothing embedded');
  t.same(ids((await hybrid.search(facts, { repositoryId: repo, query: '-dogs', limit: 10, offset: 0 })).items).sort(), [puppy.id, rain.id].sort(), 'exclusions alone list the facts without the word');
});
