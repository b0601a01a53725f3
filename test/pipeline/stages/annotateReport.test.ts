import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import { buildConfig } from '../../../src/config/load.js';
import { reportDecider, type AnnotatedSentence, type AnnotationSettings, type ReportCommand } from '../../../src/domain/report/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../../src/eventstore/envelope.js';
import { createLocalEmbedder } from '../../../src/providers/embeddings/local.js';
import type { Embedder } from '../../../src/providers/embeddings/port.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import { createOpenAIChatModel } from '../../../src/providers/llm/openai.js';
import { ModelCallError, type ChatModel } from '../../../src/providers/llm/port.js';
import { createAnnotateReportStage, lexicalQueryOf } from '../../../src/pipeline/stages/annotateReport.js';
import { PermanentJobError } from '../../../src/pipeline/types.js';
import { createHybridSearch, hybridSettingsOf } from '../../../src/search/hybrid.js';
import { DOCUMENTS } from '../../fixtures/corpus/documents.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';
import { openStageFixture, testMetadata, type StageFixture } from '../stageFixture.js';

t.setTimeout(600_000);

const SETTINGS: AnnotationSettings = { similarity_threshold: 0.7, max_facts_per_sentence: 5, min_sentence_runes: 40 };
const HYBRID = hybridSettingsOf(buildConfig({}).search.hybrid);

/** The report paragraph, written from facts of the Marie Curie pages; its last sentence is too short to annotate. */
const PARAGRAPH = [
  'Marie Curie was born in Warsaw in 1867 and she moved to Paris in 1891.',
  'In 1903, Marie Curie won the Nobel Prize in Physics with Henri Becquerel and Pierre Curie.',
  'Marie Curie was the first woman to win a Nobel Prize.',
  'Coffee is not in it.',
].join(' ');

interface Counted<T> {
  model: T;
  calls: number;
  texts: number;
  /** The texts embedded, in order. */
  seen: string[];
}

/** The chat model with its posture calls counted. */
function countingChat(base: ChatModel): Counted<ChatModel> {
  const counted: Counted<ChatModel> = { model: base, calls: 0, texts: 0, seen: [] };
  counted.model = {
    ...base,
    modelId: base.modelId,
    canSeeImages: base.canSeeImages,
    async judgePostures(input, signal) {
      counted.calls += 1;
      return base.judgePostures(input, signal);
    },
  };
  return counted;
}

/** The embedder with the texts it embedded counted. */
function countingEmbedder(base: Embedder): Counted<Embedder> {
  const counted: Counted<Embedder> = { model: base, calls: 0, texts: 0, seen: [] };
  counted.model = {
    modelId: base.modelId,
    dimensions: base.dimensions,
    async embed(texts, signal) {
      counted.calls += 1;
      counted.texts += texts.length;
      counted.seen.push(...texts);
      return base.embed(texts, signal);
    },
  };
  return counted;
}

interface Corpus {
  fixture: StageFixture;
  repositoryId: string;
  /** Fact id by content. */
  facts: Map<string, string>;
  embedder: Embedder;
}

/** Three pages (two about Marie Curie, one about coffee) decomposed by the built-in model, embedded by the built-in embedder. */
async function corpus(t: Test, embedder: Embedder | null): Promise<Corpus> {
  const local = createLocalEmbedder();
  const fixture = await openStageFixture(t, { dimensions: local.dimensions });
  const repositoryId = await fixture.createRepository();
  const chat = createLocalChatModel();
  const facts = new Map<string, string>();
  for (const slug of ['r02-marie-curie-biography', 'r07-nobel-prizes-radioactivity', 'k01-coffee-history']) {
    const document = DOCUMENTS.find((candidate) => candidate.slug === slug);
    if (!document) throw new Error(`no corpus document ${slug}`);
    const text = document.paragraphs.map((paragraph) => paragraph.join(' ')).join('\n\n');
    const contents = [...new Set((await chat.extractFacts({ text, title: document.title, chunkIndex: 0 })).map((fact) => fact.content))];
    const source = await fixture.addSource(repositoryId, contents);
    contents.forEach((content, index) => facts.set(content, source.factIds[index]));
    if (embedder) {
      const vectors = await embedder.embed(contents);
      await fixture.embedSource(repositoryId, source.sourceId, new Map(source.factIds.map((id, index) => [id, vectors[index]])), embedder.modelId);
    }
  }
  await fixture.settle();
  return { fixture, repositoryId, facts, embedder: embedder ?? local };
}

/** The id of the one fact whose content matches. */
function factLike(facts: Map<string, string>, pattern: RegExp): string {
  const matches = [...facts].filter(([content]) => pattern.test(content));
  if (matches.length !== 1) throw new Error(`${matches.length} facts match ${pattern}: ${[...facts.keys()].join(' | ')}`);
  return matches[0][1];
}

async function report(fixture: StageFixture, repositoryId: string, command: ReportCommand, reportId: string): Promise<RecordedEvent> {
  const stream = streamName('report', reportId);
  const result = await handleCommand(fixture.store, stream, reportDecider, command, testMetadata(repositoryId));
  await fixture.settle();
  const event = (await fixture.store.readStream(stream)).find((candidate) => candidate.globalPosition === result.position);
  if (!event) throw new Error(`${command.type} recorded nothing`);
  return event;
}

const annotatedOf = async (fixture: StageFixture, reportId: string): Promise<AnnotatedSentence[]> =>
  (await fixture.last(streamName('report', reportId), 'ReportAnnotated')).data.sentences as AnnotatedSentence[];

t.test('a paragraph written from the pages gets their facts on the right sentences; an edit re-annotates only what changed', async (t) => {
  const embedder = countingEmbedder(createLocalEmbedder());
  const { fixture, repositoryId, facts } = await corpus(t, embedder.model);
  const chat = countingChat(createLocalChatModel());
  const hybrid = createHybridSearch({ search: fixture.search, embedder: embedder.model, settings: HYBRID });
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: chat.model, settings: SETTINGS, maxAttempts: 3 });
  t.same(stage.triggers, ['ReportCreated', 'ReportUpdated', 'ReportAnnotationRequested']);

  const reportId = randomUUID();
  const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title: 'Marie Curie', text: PARAGRAPH }, reportId);
  embedder.texts = 0;
  await stage.run(fixture.contextFor(stage, created));
  const sentences = await annotatedOf(fixture, reportId);
  t.same(sentences.map((sentence) => sentence.index), [0, 1, 2], 'the short last sentence is not annotated');
  t.equal(embedder.texts, 3, 'the sentences are embedded in one batch, nothing else');
  t.same(embedder.seen.slice(-3), sentences.map((sentence) => sentence.text), 'the sentences themselves, not their lexical queries');
  const idsOf = (sentence: AnnotatedSentence) => sentence.facts.map((fact) => fact.fact_id);
  const coffee = new Set([...facts].filter(([content]) => /coffee|Kaldi|Ethiopia|Yemen/i.test(content)).map(([, id]) => id));
  for (const sentence of sentences) {
    t.ok(sentence.facts.length <= SETTINGS.max_facts_per_sentence);
    t.notOk(idsOf(sentence).some((id) => coffee.has(id)), `no coffee fact on sentence ${sentence.index}`);
    t.ok(sentence.facts.every((fact) => fact.score >= SETTINGS.similarity_threshold), 'every score reaches the threshold');
    t.same([...sentence.facts].sort((a, b) => b.score - a.score), sentence.facts, 'best first');
    t.equal(sentence.carried, false);
  }
  t.ok(idsOf(sentences[0]).includes(factLike(facts, /born in Warsaw in 1867/)), 'birth fact on the first sentence');
  t.ok(idsOf(sentences[0]).includes(factLike(facts, /moved to Paris in 1891/)), 'move fact on the first sentence');
  const physics = factLike(facts, /^In 1903, Marie Curie won the Nobel Prize in Physics/);
  t.ok(idsOf(sentences[1]).includes(physics), 'the 1903 prize on the second sentence');
  const firstWoman = factLike(facts, /first woman to win a Nobel Prize/);
  t.same(sentences[2].facts[0], { fact_id: firstWoman, score: sentences[2].facts[0]?.score, posture: 'supports' }, 'the sentence that is the fact supports it, first');
  t.ok(sentences[2].facts[0].score > 0.99);
  const postures = new Set(sentences.flatMap((sentence) => sentence.facts.map((fact) => fact.posture)));
  t.notOk(postures.has('contradicts'), 'nothing in the paragraph denies a fact');

  t.test('read model: status, sentences and ranked facts', async (t) => {
    await fixture.settle();
    const row = await fixture.db.knex('reports').where({ id: reportId }).first();
    t.match(row, { status: 'annotated', revision: 1, sentence_count: 3, model_id: chat.model.modelId });
    const stored = await fixture.db.knex('report_annotations').where({ report_id: reportId, sentence_index: 2 }).orderBy('rank');
    t.same(stored.map((annotation: { fact_id: string }) => annotation.fact_id), idsOf(sentences[2]));
  });

  t.test('a rerun of the same job records nothing', async (t) => {
    const head = await fixture.store.headPosition();
    await stage.run(fixture.contextFor(stage, created));
    t.equal(await fixture.store.headPosition(), head);
  });

  t.test('an edit re-annotates only the sentences whose text changed', async (t) => {
    const edited = PARAGRAPH.replace('with Henri Becquerel and Pierre Curie.', 'and in 1911, Marie Curie won the Nobel Prize in Chemistry.');
    const update = await report(fixture, repositoryId, { type: 'UpdateReport', reportId, text: `${edited}\n\nMarie Curie was born in Warsaw in 1867 and she moved to Paris in 1891.` }, reportId);
    chat.calls = 0;
    embedder.texts = 0;
    await stage.run(fixture.contextFor(stage, update));
    const after = await annotatedOf(fixture, reportId);
    t.same(
      after.map((sentence) => [sentence.index, sentence.carried]),
      [
        [0, true],
        [1, false],
        [2, true],
        [4, false],
      ],
      'unchanged sentences carried; the changed one and the added repeat annotated anew',
    );
    t.same(after[0].facts, sentences[0].facts, 'an unchanged sentence keeps its facts');
    t.same(after[2].facts, sentences[2].facts);
    t.same(after[3].facts, sentences[0].facts, 'the added repeat finds what its twin found');
    t.ok(idsOf(after[1]).includes(factLike(facts, /^In 1911, Marie Curie won the Nobel Prize in Chemistry/)), 'the changed sentence has its new facts');
    t.equal(embedder.texts, 2, 'only the changed and the added sentence are embedded');
    t.ok(chat.calls <= 2, 'and judged');
  });

  t.test('a carried sentence leaves out a fact retracted since it was annotated', async (t) => {
    const before = await annotatedOf(fixture, reportId);
    const kept = before.find((sentence) => sentence.index === 2);
    t.ok(kept?.facts.some((fact) => fact.fact_id === firstWoman), 'the sentence has the fact');
    // The fact's source is deleted: cleanup_facts retracts it.
    await fixture.store.append(`fact-${firstWoman}`, [{ type: 'FactRetracted', data: { source_id: randomUUID(), reason: 'its only source was deleted' }, metadata: testMetadata(repositoryId) }], 'any');
    await fixture.settle();
    const current = (await fixture.store.readStream(streamName('report', reportId))).reduce((text, event) => (typeof event.data.text === 'string' ? event.data.text : text), '');
    const update = await report(fixture, repositoryId, { type: 'UpdateReport', reportId, text: current.replace('and in 1911, Marie Curie won the Nobel Prize in Chemistry.', 'and in 1911, she won the Nobel Prize in Chemistry.') }, reportId);
    await stage.run(fixture.contextFor(stage, update));
    const after = (await annotatedOf(fixture, reportId)).find((sentence) => sentence.index === 2);
    t.equal(after?.carried, true, 'the unchanged sentence is carried');
    t.notOk(after?.facts.some((fact) => fact.fact_id === firstWoman), 'without the retracted fact');
    t.same(after?.facts.map((fact) => fact.fact_id), kept?.facts.filter((fact) => fact.fact_id !== firstWoman).map((fact) => fact.fact_id), 'the others kept, in order');
  });

  t.test('a carried sentence keeps a fact merged since it was annotated: the reads show its survivor', async (t) => {
    const birth = factLike(facts, /born in Warsaw in 1867/);
    const before = (await annotatedOf(fixture, reportId)).find((sentence) => sentence.index === 0);
    t.ok(before?.facts.some((fact) => fact.fact_id === birth), 'the sentence cites the fact');
    t.notOk(before?.facts.some((fact) => fact.fact_id === physics), 'and not the survivor-to-be');
    // deduplicate_facts merges the birth fact into another: its id leads to the survivor.
    await fixture.store.append(`fact-${birth}`, [{ type: 'FactMergedInto', data: { survivor_id: physics, similarity: 0.95, source_id: null, catchup: false }, metadata: testMetadata(repositoryId) }], 'any');
    await fixture.settle();
    const current = (await fixture.store.readStream(streamName('report', reportId))).reduce((text, event) => (typeof event.data.text === 'string' ? event.data.text : text), '');
    const update = await report(fixture, repositoryId, { type: 'UpdateReport', reportId, text: current.replace('and in 1911, she won the Nobel Prize in Chemistry.', 'and in 1911, she won a second Nobel Prize, in Chemistry.') }, reportId);
    await stage.run(fixture.contextFor(stage, update));
    const after = (await annotatedOf(fixture, reportId)).find((sentence) => sentence.index === 0);
    t.equal(after?.carried, true, 'the unchanged sentence is carried');
    t.same(after?.facts, before?.facts, 'with every fact it had, the merged one as cited');
  });

  t.test('an annotation request re-annotates every sentence', async (t) => {
    const requested = await report(fixture, repositoryId, { type: 'RequestAnnotation' }, reportId);
    embedder.texts = 0;
    await stage.run(fixture.contextFor(stage, requested));
    const after = await annotatedOf(fixture, reportId);
    t.ok(after.every((sentence) => !sentence.carried));
    t.equal(embedder.texts, 4);
  });

  t.test('a title change needs no annotation', async (t) => {
    const titled = await report(fixture, repositoryId, { type: 'UpdateReport', reportId, title: 'Curie, briefly' }, reportId);
    t.equal(stage.subjectOf(titled), null, 'no job is queued for it');
    const head = await fixture.store.headPosition();
    await stage.run(fixture.contextFor(stage, titled));
    t.equal(await fixture.store.headPosition(), head);
  });
});

t.test('a Chinese and a Japanese report are annotated: a CJK sentence says in 15 characters what an English one says in 50', async (t) => {
  const embedder = createLocalEmbedder();
  const fixture = await openStageFixture(t, { dimensions: embedder.dimensions });
  const repositoryId = await fixture.createRepository();
  const contents = [
    '居里夫人于1903年获得诺贝尔物理学奖。',
    '咖啡起源于埃塞俄比亚的高原。',
    'マリー・キュリーは1903年にノーベル物理学賞を受賞した。',
    'コーヒーはエチオピアの高原が起源である。',
  ];
  const source = await fixture.addSource(repositoryId, contents);
  const vectors = await embedder.embed(contents);
  await fixture.embedSource(repositoryId, source.sourceId, new Map(source.factIds.map((id, index) => [id, vectors[index]])), embedder.modelId);
  await fixture.settle();
  const hybrid = createHybridSearch({ search: fixture.search, embedder, settings: HYBRID });
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: createLocalChatModel(), settings: SETTINGS, maxAttempts: 3 });
  const cases = [
    // Sentences end at 。！？ with no space after them; a question of a few characters is too short in any script.
    { title: '居里夫人', text: '居里夫人于1903年获得诺贝尔物理学奖。咖啡起源于埃塞俄比亚的高原。真的吗？', physics: 0, coffee: 1 },
    { title: 'キュリー', text: 'マリー・キュリーは1903年にノーベル物理学賞を受賞した。コーヒーはエチオピアの高原が起源である。すごい！本当？', physics: 2, coffee: 3 },
  ];
  for (const { title, text, physics, coffee } of cases) {
    const reportId = randomUUID();
    const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title, text }, reportId);
    await stage.run(fixture.contextFor(stage, created));
    const sentences = await annotatedOf(fixture, reportId);
    t.same(sentences.map((sentence) => [sentence.index, sentence.text]), [
      [0, contents[physics]],
      [1, contents[coffee]],
    ], `${title}: both statements annotated, the short exclamation and question not`);
    t.equal(sentences[0]?.facts[0]?.fact_id, source.factIds[physics], `${title}: the prize fact on the prize sentence`);
    t.equal(sentences[1]?.facts[0]?.fact_id, source.factIds[coffee], `${title}: the coffee fact on the coffee sentence`);
  }
});

t.test('through the OpenAI-compatible test server: a contradicting sentence is labelled contradicts', async (t) => {
  const embedder = createLocalEmbedder();
  const { fixture, repositoryId, facts } = await corpus(t, embedder);
  const server = await startOpenAIServer();
  t.teardown(server.close);
  const chat = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-test', retry: { maxAttempts: 2, baseDelayMs: 5, maxDelayMs: 50, perCallTimeoutMs: 5000 } });
  const hybrid = createHybridSearch({ search: fixture.search, embedder, settings: HYBRID });
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat, settings: SETTINGS, maxAttempts: 3 });
  const reportId = randomUUID();
  const text = 'Marie Curie did not win the Nobel Prize in Chemistry in 1911. Marie Curie was the first woman to win a Nobel Prize.';
  const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title: 'Doubts', text }, reportId);
  await stage.run(fixture.contextFor(stage, created));
  const [denial, agreement] = await annotatedOf(fixture, reportId);
  const chemistry = factLike(facts, /^In 1911, Marie Curie won the Nobel Prize in Chemistry/);
  t.equal(denial.facts.find((fact) => fact.fact_id === chemistry)?.posture, 'contradicts', 'the model labelled the denial');
  t.equal(agreement.facts.find((fact) => fact.fact_id === factLike(facts, /first woman/))?.posture, 'supports');
  const posture = server.bodies.filter((body) => body.path === 'chat');
  t.equal(posture.length, 2, 'one posture call per sentence');
  const messages = posture[0].body.messages as Array<{ role: string; content: string }>;
  t.match(messages[0].content, /how facts stand to one sentence of a report/, 'the posture phase prompt');
  t.match(JSON.parse(messages[1].content), { sentence: String, facts: [{ id: String, content: String }] });
  t.equal(server.requests.embeddings, 0, 'the embedder is the local one here');

  t.test('irrelevant and invented judgements are dropped', async (t) => {
    const scripted = await startOpenAIServer({
      chat: (document, phase) => {
        if (phase !== 'posture') throw new Error(`unexpected phase ${phase}`);
        const asked = document.facts as Array<{ id: string }>;
        return {
          judgements: [
            { fact_id: asked[0].id, posture: 'contradicts' },
            ...asked.slice(1).map((fact) => ({ fact_id: fact.id, posture: 'irrelevant' })),
            { fact_id: 'invented-id', posture: 'supports' },
          ],
        };
      },
    });
    t.teardown(scripted.close);
    const model = createOpenAIChatModel({ baseUrl: scripted.baseUrl, model: 'gpt-test', retry: { maxAttempts: 2, baseDelayMs: 5, maxDelayMs: 50, perCallTimeoutMs: 5000 } });
    const judged = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: model, settings: SETTINGS, maxAttempts: 3 });
    const id = randomUUID();
    const trigger = await report(fixture, repositoryId, { type: 'CreateReport', reportId: id, title: 'T', text: 'In 1903, Marie Curie won the Nobel Prize in Physics.' }, id);
    await judged.run(fixture.contextFor(judged, trigger));
    const [only] = await annotatedOf(fixture, id);
    t.equal(only.facts.length, 1, 'one fact kept');
    t.equal(only.facts[0].posture, 'contradicts');
  });
});

t.test('without vectors: lexical candidates, word-set similarity', async (t) => {
  const { fixture, repositoryId, facts } = await corpus(t, null);
  const hybrid = createHybridSearch({ search: fixture.search, embedder: null, settings: HYBRID });
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: createLocalChatModel(), settings: SETTINGS, maxAttempts: 3 });
  const reportId = randomUUID();
  const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title: 'T', text: PARAGRAPH }, reportId);
  await stage.run(fixture.contextFor(stage, created));
  const sentences = await annotatedOf(fixture, reportId);
  t.same(sentences[2].facts[0], { fact_id: factLike(facts, /first woman/), score: 1, posture: 'supports' }, 'the same words: similarity 1');
  t.ok(sentences.flatMap((sentence) => sentence.facts).every((fact) => fact.score >= SETTINGS.similarity_threshold));
  t.equal(lexicalQueryOf('Marie Curie, or Curie: a 1903 prize!'), 'marie OR curie OR 1903', 'names and numbers OR-ed');
  t.equal(lexicalQueryOf('The enzyme turns starch into sugar or malt.'), 'the OR enzyme OR turns OR starch OR into OR sugar OR malt', 'without names: every word of 3 letters or more');
  t.equal(lexicalQueryOf('In 1911 she won it.'), '1911', 'a capitalised function word is no name');
});

t.test('a failure a retry cannot fix fails the report; a transient one is retried', async (t) => {
  const { fixture, repositoryId } = await corpus(t, null);
  const hybrid = createHybridSearch({ search: fixture.search, embedder: null, settings: HYBRID });
  let failure: Error = new ModelCallError('the provider answered 500', false, 500);
  const broken: ChatModel = {
    ...createLocalChatModel(),
    async judgePostures() {
      throw failure;
    },
  };
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: broken, settings: SETTINGS, maxAttempts: 3 });
  const reportId = randomUUID();
  const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title: 'T', text: PARAGRAPH }, reportId);
  await t.rejects(stage.run(fixture.contextFor(stage, created)), /answered 500/);
  await fixture.settle();
  t.match(await fixture.db.knex('reports').where({ id: reportId }).first(), { status: 'processing' }, 'a transient failure leaves it to the retry');
  failure = new ModelCallError('the provider answered 401', true, 401);
  await t.rejects(stage.run(fixture.contextFor(stage, created, { attempts: 2 })), PermanentJobError);
  await fixture.settle();
  t.match(await fixture.db.knex('reports').where({ id: reportId }).first(), { status: 'failed', failure: /annotate_report: the provider answered 401/ });
});

t.test('a long failure keeps its start and its reason at the end, emoji whole, and still fails the report', async (t) => {
  const { fixture, repositoryId } = await corpus(t, null);
  const hybrid = createHybridSearch({ search: fixture.search, embedder: null, settings: HYBRID });
  // The reason is kept to 2,000 characters, its start and its end: cut inside an emoji, its half
  // could not be stored, and the report stayed `processing` for good; cut to its start, the
  // reason at its end was lost.
  const message = `😀${'x'.repeat(3000)} 😀 the provider refused the request`;
  const broken: ChatModel = {
    ...createLocalChatModel(),
    async judgePostures() {
      throw new ModelCallError(message, true, 400);
    },
  };
  const stage = createAnnotateReportStage({ store: fixture.store, knex: fixture.db.knex, hybrid, chat: broken, settings: SETTINGS, maxAttempts: 3 });
  const reportId = randomUUID();
  const created = await report(fixture, repositoryId, { type: 'CreateReport', reportId, title: 'T', text: PARAGRAPH }, reportId);
  await t.rejects(stage.run(fixture.contextFor(stage, created)), PermanentJobError);
  await fixture.settle();
  const row = await fixture.db.knex('reports').where({ id: reportId }).first();
  t.equal(row?.status, 'failed');
  t.match(row?.failure, /^annotate_report: 😀x+ … \(\d+ characters left out\) … x+ 😀 the provider refused the request$/, 'the start and the reason at the end, the emoji whole');
});
