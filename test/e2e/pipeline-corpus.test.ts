import t from 'tap';
import { registerUser, startTestService } from '../helpers/service.js';
import {
  assertNoFailedTasks,
  annotationSnapshot,
  assertSameAsRecorded,
  clusterKey,
  createRepository,
  injectApi,
  PIPELINE_TEST_OVERRIDES,
  recordedSnapshot,
  recordSnapshot,
  registerCorpus,
  relationBetween,
  retrieveAttemptsBySource,
  startCorpusServer,
  waitForPipeline,
  type CorpusSnapshot,
  type SnapshotFact,
} from '../helpers/corpus.js';
import {
  CONCEPTS,
  CORPUS_SIZE,
  EXACT_DUPLICATES,
  expectedFactsByDocument,
  MUST_NOT_MERGE,
  NEAR_DUPLICATE_CLUSTERS,
  PARAPHRASE,
  RELATIONS,
  type Band,
} from '../fixtures/corpus/expected.js';

/**
 * The whole pipeline on the embedded default (PGlite, local chat model, local embedder) over
 * the test corpus served by a real HTTP server: every document fetched and decomposed, planted
 * duplicates merged and look-alikes kept apart, concepts with their aliases, relations in their
 * bands, and a paraphrase that only hybrid search finds.
 */
t.setTimeout(900_000);

const web = await startCorpusServer();
const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
t.teardown(async () => {
  await service.close();
  await web.close();
});
const { token } = await registerUser(service, 'corpus@example.org');
const api = injectApi(service, token);
const repositoryId = await createRepository(api, 'Corpus');
const sources = await registerCorpus(api, repositoryId, web.documents);
const started = Date.now();
const snapshot: CorpusSnapshot = await waitForPipeline(api, repositoryId, { timeoutMs: 600_000 });
t.comment(`corpus processed in ${((Date.now() - started) / 1000).toFixed(1)} s: ${snapshot.facts.length} facts, ${snapshot.concepts.length} concepts, ${snapshot.relations.length} relations`);

// A report written from the corpus, annotated with its facts: part of what both tiers must agree on.
snapshot.annotations = await annotationSnapshot(api, repositoryId);

if (process.env.FACTLOG_UPDATE_SNAPSHOT) recordSnapshot(snapshot);

t.test('the run equals the recorded snapshot the other corpus tests compare with', async (t) => {
  const recorded = recordedSnapshot();
  t.same(snapshot.sources, recorded.sources, 'sources');
  assertSameAsRecorded(t, 'pipeline-corpus', snapshot, recorded);
});

t.test('a report written from the corpus gets the facts behind its sentences', async (t) => {
  const [becquerel, turing, coffee, denial, weather] = snapshot.annotations ?? [];
  t.ok(becquerel?.facts.includes('Henri Becquerel discovered radioactivity in 1896. (supports)'), 'a restated fact supports its sentence');
  t.ok(turing?.facts.includes('Alan Turing worked at Bletchley Park during the Second World War. (supports)'));
  t.ok(coffee?.facts.includes('The Dutch East India Company shipped coffee from Java to Amsterdam. (supports)'));
  t.ok(denial?.facts.some((fact) => fact.includes('Marie Curie won the Nobel Prize in Chemistry in 1911.') && fact.endsWith('(contradicts)')), 'a denied fact contradicts');
  t.same(weather?.facts, [], 'a sentence about nothing stored gets no fact');
  t.ok(snapshot.annotations?.every((sentence) => sentence.facts.length <= 5), 'at most max_facts_per_sentence each');
});

const clusterOf = (content: string): SnapshotFact | undefined => snapshot.facts.find((fact) => fact.members.includes(content));
const { min_shared_fact_count: minShared, stable_shared_fact_count: stableShared } = service.config.concepts;
const bandOf = (count: number): Band => (count >= stableShared ? 'stable' : count >= minShared ? 'weak' : 'insignificant');

t.test('summaries and syntheses cite only facts of their concept; slices freeze at exactly 20 facts', async (t) => {
  const summaries = snapshot.summaries ?? [];
  t.ok(summaries.length > 20, 'concepts with facts have summaries');
  t.same(summaries.filter((summary) => !summary.slices_valid || !summary.synthesis_valid).map((summary) => summary.concept), [], 'every slice and synthesis is valid');
  t.same(summaries.filter((summary) => !summary.synthesized).map((summary) => summary.concept), [], 'every concept with facts has a synthesis');
  t.ok(summaries.some((summary) => summary.slices >= 2), 'some concept has more than 20 facts: a frozen slice and another');
});

t.test('every document is fetched and processed', async (t) => {
  t.equal(web.documents.length, CORPUS_SIZE.documents);
  t.equal(web.documents.filter((document) => document.kind === 'pdf').length, CORPUS_SIZE.pdf);
  t.equal(sources.size, CORPUS_SIZE.documents, 'one source per document');
  t.same(
    snapshot.sources.filter((source) => source.status !== 'processed'),
    [],
    'no source failed or is left behind',
  );
  await assertNoFailedTasks(t, api, repositoryId);
  // Once per attempt of its retrieve job: once, unless a transient failure made the job retry.
  const attempts = await retrieveAttemptsBySource(api, repositoryId);
  for (const document of web.documents) {
    const tries = attempts.get(sources.get(document.slug) ?? '') ?? 0;
    t.ok(tries >= 1, `${document.slug} was retrieved`);
    t.equal(web.hits.get(document.path), tries, `${document.slug} fetched once per attempt (${tries} attempt(s))`);
  }
});

t.test('each document yields its sentences as facts, linked to it', async (t) => {
  for (const [slug, sentences] of expectedFactsByDocument()) {
    const missing = sentences.filter((sentence) => !clusterOf(sentence)?.sources.includes(slug));
    t.same(missing, [], `${slug}: every sentence is a fact of the document`);
  }
  const expected = new Set([...expectedFactsByDocument().values()].flat());
  const unexpected = snapshot.facts.filter((fact) => fact.kind === 'text' && !fact.members.some((member) => expected.has(member)));
  t.same(unexpected, [], 'no text fact that is not a sentence of the corpus (navigation, bylines, footers)');
});

t.test('exact duplicates are one fact linked to every document that states them', async (t) => {
  for (const duplicate of EXACT_DUPLICATES) {
    const cluster = clusterOf(duplicate.content);
    t.ok(cluster, duplicate.content);
    t.same(cluster?.members, [duplicate.content], 'nothing else merged into it');
    t.same(cluster?.sources, [...duplicate.documents].sort(), 'linked to each document');
    const found = await api('GET', `/api/v1/repositories/${repositoryId}/facts?mode=lexical&query=${encodeURIComponent(`"${duplicate.content.replace(/\.$/, '')}"`)}`);
    t.equal(found.status, 200);
    t.equal(found.body.items.filter((item: { content: string }) => item.content === duplicate.content).length, 1, 'one fact, not one per document');
  }
});

t.test('near duplicates merge into one visible fact; look-alikes do not', async (t) => {
  for (const planted of NEAR_DUPLICATE_CLUSTERS) {
    const cluster = clusterOf(planted.members[0] as string);
    t.same(cluster?.members, [...planted.members].sort(), `one cluster: ${planted.members[0]}`);
    t.same(cluster?.sources, [...planted.documents].sort(), 'the survivor carries every document of the cluster');
  }
  for (const [one, other] of MUST_NOT_MERGE) {
    const a = clusterOf(one);
    const b = clusterOf(other);
    t.ok(a && b && a !== b, `kept apart: "${one}" / "${other}"`);
  }
  const plantedKeys = new Set(NEAR_DUPLICATE_CLUSTERS.map((planted) => clusterKey([...planted.members].sort())));
  t.same(
    snapshot.facts.filter((fact) => fact.members.length > 1 && !plantedKeys.has(clusterKey(fact.members))).map((fact) => fact.members),
    [],
    'no merge beyond the planted near duplicates',
  );
  // Merged facts are hidden from lists and search.
  for (const planted of NEAR_DUPLICATE_CLUSTERS) {
    const listed = await api('GET', `/api/v1/repositories/${repositoryId}/facts?mode=lexical&query=${encodeURIComponent(planted.members[0] as string)}&limit=50`);
    const visible = listed.body.items.filter((item: { content: string }) => planted.members.includes(item.content));
    t.equal(visible.length, 1, `search shows one member of "${planted.members[0]}"`);
  }
});

t.test('concepts exist with their aliases and facts', async (t) => {
  for (const expected of CONCEPTS) {
    const concept = snapshot.concepts.find((candidate) => candidate.name === expected.name);
    t.ok(concept, `concept ${expected.name}`);
    if (!concept) continue;
    for (const alias of expected.aliases) t.ok(concept.aliases.some((candidate) => candidate.toLowerCase() === alias.toLowerCase()), `${expected.name} has alias ${alias}`);
    t.ok(concept.facts.length > 0, `${expected.name} has facts`);
    const byName = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${encodeURIComponent(expected.name)}`);
    t.equal(byName.status, 200, `${expected.name} found by canonical name`);
  }
  // Aliases resolve: facts naming only the acronym or the surname belong to the concept.
  const engine = snapshot.concepts.find((concept) => concept.name === 'Automatic Computing Engine');
  t.ok(engine?.facts.some((key) => key.includes('The ACE was one of the first designs for a stored-program computer.')), 'a fact naming only the acronym belongs to the concept');
  const turing = snapshot.concepts.find((concept) => concept.name === 'Alan Turing');
  t.ok(turing?.facts.some((key) => key.includes('Turing designed the Bombe with Gordon Welchman.')), 'a fact naming only the surname belongs to the person');
});

t.test('relations are in the right band', async (t) => {
  for (const expected of RELATIONS) {
    const [a, b] = [expected.a, expected.b];
    const relation = relationBetween(snapshot, a, b);
    t.ok(relation, `relation ${a} – ${b}`);
    if (!relation) continue;
    t.ok(
      relation.shared_fact_count >= expected.sharedFacts[0] && relation.shared_fact_count <= expected.sharedFacts[1],
      `${a} – ${b}: ${relation.shared_fact_count} shared facts, expected ${expected.sharedFacts.join('–')} (${expected.why})`,
    );
    t.equal(bandOf(relation.shared_fact_count), expected.band, `${a} – ${b} is ${expected.band}`);

    // The read surface agrees: insignificant relations only with show_insignificant=true.
    const conceptReply = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${encodeURIComponent(a)}`);
    const otherReply = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${encodeURIComponent(b)}`);
    t.ok(conceptReply.status === 200 && otherReply.status === 200, 'both concepts found by name');
    const pair = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${conceptReply.body.id}/relations/${otherReply.body.id}`);
    t.equal(pair.status, 200, `${a} – ${b} readable as a pair`);
    t.equal(pair.body.shared_fact_count, relation.shared_fact_count);
    t.equal(pair.body.band, expected.band, 'the reply names the band');
    const listed = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${conceptReply.body.id}/relations?limit=500`);
    t.equal(listed.status, 200);
    const mentions = listed.body.items.some((item: { concept: { id: string } }) => item.concept.id === otherReply.body.id);
    t.equal(mentions, expected.band !== 'insignificant', expected.band === 'insignificant' ? 'hidden by default' : 'listed by default');
    const all = await api('GET', `/api/v1/repositories/${repositoryId}/concepts/${conceptReply.body.id}/relations?limit=500&show_insignificant=true`);
    const item = all.body.items.find((candidate: { concept: { id: string } }) => candidate.concept.id === otherReply.body.id);
    t.equal(item?.band, expected.band, 'listed with its band when insignificant relations are shown');
  }
});

t.test('hybrid search finds a paraphrase that lexical search misses', async (t) => {
  const query = encodeURIComponent(PARAPHRASE.query);
  const lexical = await api('GET', `/api/v1/repositories/${repositoryId}/facts?query=${query}&mode=lexical`);
  t.equal(lexical.status, 200);
  t.equal(lexical.body.mode, 'lexical', 'the lexical mode answered');
  t.equal(lexical.body.total, 0, 'no fact shares a word with the query');

  const hybrid = await api('GET', `/api/v1/repositories/${repositoryId}/facts?query=${query}&mode=hybrid&limit=5`);
  t.equal(hybrid.status, 200);
  t.equal(hybrid.body.mode, 'hybrid', 'the hybrid mode answered');
  t.notOk(hybrid.body.fallback_reason, 'no fallback');
  t.equal(hybrid.body.items[0]?.content, PARAPHRASE.fact, 'the paraphrased fact is the best match');

  const byDefault = await api('GET', `/api/v1/repositories/${repositoryId}/facts?query=${query}&limit=5`);
  t.equal(byDefault.body.mode, 'hybrid', 'hybrid is the default mode');
  t.equal(byDefault.body.items[0]?.content, PARAPHRASE.fact);

  const bad = await api('GET', `/api/v1/repositories/${repositoryId}/facts?query=${query}&mode=fuzzy`);
  t.equal(bad.status, 400, 'an unknown mode is refused');
});
