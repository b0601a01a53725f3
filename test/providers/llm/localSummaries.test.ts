import t from 'tap';
import { citedFactIds } from '../../../src/domain/concept/summaries.js';
import { createOpenAIChatModel, isReasoningModel } from '../../../src/providers/llm/openai.js';
import { citeFact, localSliceSummary, localSynthesis } from '../../../src/providers/llm/localSummaries.js';
import type { SynthesisInput } from '../../../src/providers/llm/port.js';
import { builtInPromptset } from '../../../src/providers/llm/promptsets.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';

const concept = { id: 'c1', canonicalName: 'Marie Curie', context: 'person', aliases: ['Curie'] };
const facts = [
  { id: 'f1', content: 'Radium glows in the dark.' },
  { id: 'f2', content: 'Marie Curie was a physicist and chemist.' },
  { id: 'f3', content: 'Curie discovered polonium in 1898 [with Pierre].' },
  { id: 'f4', content: 'Paris has many museums.' },
];
const synthesisInput: SynthesisInput = {
  concept,
  summaries: [],
  facts,
  relatedConcepts: [{ id: 'c2', canonicalName: 'Pierre Curie', summary: null }],
  relatedSyntheses: [],
  images: [
    { factId: 'f5', imageId: 'i1', caption: 'A photo of Marie Curie.' },
    { factId: 'f6', imageId: 'i2', caption: 'Her laboratory.' },
  ],
  maxImages: 1,
  maxTokens: 10_000,
  thinkingLevel: 'high',
};

/** Every sentence of the Markdown's prose is the link text of a citation of that very fact. */
function onlyCitedFacts(markdown: string, known: ReadonlyArray<{ id: string; content: string }>): boolean {
  const byId = new Map(known.map((fact) => [fact.id, fact]));
  const links = [...markdown.matchAll(/\[((?:\\.|[^\]\\])*)\]\(<fact:([^>]*)>\)/g)];
  const prose = markdown.replace(/\[((?:\\.|[^\]\\])*)\]\(<fact:[^>]*>\)/g, '').replace(/^#+ .*$/gm, '').replace(/^- [^\n]*$/gm, (line) => (line.trim() === '-' ? '' : line));
  return links.length > 0 && links.every(([, text, id]) => citeFact(byId.get(id ?? '') ?? { id: '', content: '\u0000' }) === `[${text}](<fact:${id}>)`) && prose.replace(/[-\s]/g, '') === '';
}

t.test('the built-in summary is extractive: facts that name the concept first, each cited, in their order', async (t) => {
  const { content } = localSliceSummary({ concept, facts, maxTokens: 600 });
  t.same(citedFactIds(content), ['f1', 'f2', 'f3', 'f4'], 'all fit within max_tokens, in order');
  t.ok(onlyCitedFacts(content, facts), 'no sentence of its own');
  t.match(content, /\[Curie discovered polonium in 1898 \\\[with Pierre\\\]\.\]\(<fact:f3>\)/, 'brackets in a fact are escaped');
  const short = localSliceSummary({ concept, facts, maxTokens: 12 });
  t.same(citedFactIds(short.content), ['f2'], 'a small budget keeps the fact that says what the concept is');
  t.equal(localSliceSummary({ concept, facts: [], maxTokens: 600 }).content, '');
});

t.test('the built-in synthesis: an overview of what the concept is, then details and related concepts; images among the candidates', async (t) => {
  const output = localSynthesis(synthesisInput);
  const [overview] = output.content.split('\n\n');
  t.same(citedFactIds(overview), ['f2', 'f3'], 'the overview: facts naming the concept, the definition among them');
  t.same(citedFactIds(output.content).sort(), ['f1', 'f2', 'f3', 'f4']);
  t.match(output.content, /### Related concepts\n\n- Pierre Curie/);
  t.same(output.imageFactIds, ['f5'], 'at most max_images');
  t.ok(onlyCitedFacts(output.content.replace(/### Related concepts[\s\S]*$/, ''), facts));
});

t.test('the OpenAI-compatible client sends the summarization and synthesis phases; reasoning effort only to reasoning models', async (t) => {
  const server = await startOpenAIServer();
  t.teardown(server.close);
  const retry = { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, perCallTimeoutMs: 5_000 };
  const plain = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-4o-mini', retry });
  const summary = await plain.summarizeFacts({ concept, facts, maxTokens: 600, promptset: builtInPromptset() });
  t.same(citedFactIds(summary.content), ['f1', 'f2', 'f3', 'f4'], 'the test server answers with the built-in model');
  let [received] = server.bodies.slice(-1);
  const messages = received.body.messages as Array<{ role: string; content: string }>;
  t.equal(messages[0].content, builtInPromptset().phases.summarization);
  t.same(JSON.parse(messages[1].content).slice.facts.map((fact: { id: string }) => fact.id), ['f1', 'f2', 'f3', 'f4']);
  t.equal(received.body.max_tokens, 1200);
  t.notOk('reasoning_effort' in received.body);

  const synthesis = await plain.synthesizeConcept(synthesisInput);
  t.same(synthesis.imageFactIds, ['f5']);
  [received] = server.bodies.slice(-1);
  t.equal((received.body.messages as Array<{ content: string }>)[0].content, builtInPromptset().phases.synthesis);
  t.notOk('reasoning_effort' in received.body, 'a model that does not reason never sees reasoning_effort');
  t.equal(received.body.max_tokens, 10_000);

  const reasoning = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'o4-mini', retry });
  await reasoning.synthesizeConcept(synthesisInput);
  [received] = server.bodies.slice(-1);
  t.equal(received.body.reasoning_effort, 'high', 'thinking_level goes to a reasoning model');
  t.equal(received.body.max_completion_tokens, 10_000);
  t.ok(isReasoningModel('openai/gpt-5') && isReasoningModel('deepseek-r1:7b') && !isReasoningModel('llama3.1') && !isReasoningModel('gpt-4o'));

  // Images the model invents are dropped.
  const inventing = await startOpenAIServer({ chat: () => ({ content: '[x](<fact:f2>)', image_ids: ['f6', 'nope', 'f6', 'f5'] }) });
  t.teardown(inventing.close);
  const model = createOpenAIChatModel({ baseUrl: inventing.baseUrl, model: 'gpt-4o', retry });
  t.same((await model.synthesizeConcept({ ...synthesisInput, maxImages: 5 })).imageFactIds, ['f6', 'f5']);
});
