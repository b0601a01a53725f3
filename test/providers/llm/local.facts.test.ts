import t from 'tap';
import type { FactExtractionInput } from '../../../src/providers/llm/port.js';
import { createLocalFactExtractor, LOCAL_FACT_EXTRACTOR_MODEL_ID } from '../../../src/providers/llm/local.js';
import { extractDocument } from '../../../src/providers/fetch/extract.js';
import { longArticle } from '../../helpers/longArticle.js';

const extractor = createLocalFactExtractor();

async function contents(text: string, extra: Partial<FactExtractionInput> = {}): Promise<string[]> {
  const facts = await extractor.extractFacts({ text, chunkIndex: 0, ...extra });
  return facts.map((fact) => fact.content);
}

/** The facts of a document of this type, read by the extractor as the pipeline reads it. */
async function documentFacts(contentType: string, body: string): Promise<string[]> {
  const { text } = await extractDocument({ body: Buffer.from(body), contentType });
  return contents(text);
}

t.test('identifies itself as the local model', async (t) => {
  t.equal(extractor.modelId, 'local/rule-based-v1');
  t.equal(LOCAL_FACT_EXTRACTOR_MODEL_ID, extractor.modelId);
});

t.test('resolves leading pronouns to the previous subject', async (t) => {
  const facts = await extractor.extractFacts({
    text: 'Marie Curie was a physicist. She won two Nobel Prizes. In 1891, she moved to Paris.',
    chunkIndex: 0,
  });
  t.same(facts, [
    { content: 'Marie Curie was a physicist.', sourceText: 'Marie Curie was a physicist.' },
    { content: 'Marie Curie won two Nobel Prizes.', sourceText: 'She won two Nobel Prizes.' },
    { content: 'In 1891, Marie Curie moved to Paris.', sourceText: 'In 1891, she moved to Paris.' },
  ]);
  t.same(await contents('The Curies discovered polonium in 1898. They named it after Poland. Their daughter Irène also won a Nobel Prize.'), [
    'The Curies discovered polonium in 1898.',
    'The Curies named it after Poland.',
    "The Curies' daughter Irène also won a Nobel Prize.",
  ]);
  t.same(
    await contents('The Nobel Prize in Physics was awarded to Henri Becquerel in 1903. He was a French engineer.'),
    ['The Nobel Prize in Physics was awarded to Henri Becquerel in 1903.', 'Henri Becquerel was a French engineer.'],
    'a person named in the previous sentence when its subject is not a person',
  );
  t.same(await contents('Radium and polonium are radioactive elements. These were discovered in 1898.'), [
    'Radium and polonium are radioactive elements.',
    'Radium and polonium were discovered in 1898.',
  ]);
});

t.test('resolves to descriptive subjects: relative clauses, people named by common nouns', async (t) => {
  t.same(await contents('The physicist who discovered radium was born in Warsaw. She died in 1934.'), [
    'The physicist who discovered radium was born in Warsaw.',
    'The physicist who discovered radium died in 1934.',
  ]);
  t.same(await contents('The element that the Curies discovered glows in the dark. It is very radioactive.'), [
    'The element that the Curies discovered glows in the dark.',
    'The element that the Curies discovered is very radioactive.',
  ]);
  t.same(await contents('After the war the company expanded rapidly. It hired 300 workers.'), [
    'After the war the company expanded rapidly.',
    'The company hired 300 workers.',
  ]);
  t.same(await contents('Apple Inc. was founded in 1976 by Steve Jobs. It is headquartered in Cupertino.'), [
    'Apple Inc. was founded in 1976 by Steve Jobs.',
    'Apple Inc. is headquartered in Cupertino.',
  ]);
  t.same(await contents('A physicist measured the sample in 1902. He published the result.'), [
    'A physicist measured the sample in 1902.',
    'The physicist published the result.',
  ]);
});

t.test('resolves possessives', async (t) => {
  t.same(await contents('The capital of France is Paris. Its population is about two million.'), [
    'The capital of France is Paris.',
    'The population of the capital of France is about two million.',
  ]);
  t.same(await contents('Gustave Eiffel designed the tower. His company built it in two years.'), [
    'Gustave Eiffel designed the tower.',
    "Gustave Eiffel's company built it in two years.",
  ]);
  t.same(await contents('France is a country in Western Europe. Its capital is Paris. It has a population of 68 million people.'), [
    'France is a country in Western Europe.',
    "France's capital is Paris.",
    'France has a population of 68 million people.',
  ]);
  t.same(await contents('Marie Curie was born in Warsaw. Her father taught mathematics.'), [
    'Marie Curie was born in Warsaw.',
    "Marie Curie's father taught mathematics.",
  ]);
});

t.test('splits independent clauses and leaves dependent ones whole', async (t) => {
  const facts = await extractor.extractFacts({
    text: 'Marie Curie won two Nobel Prizes; her husband Pierre shared the first one.',
    chunkIndex: 0,
  });
  t.same(facts, [
    { content: 'Marie Curie won two Nobel Prizes.', sourceText: 'Marie Curie won two Nobel Prizes; her husband Pierre shared the first one.' },
    {
      content: "Marie Curie's husband Pierre shared the first one.",
      sourceText: 'Marie Curie won two Nobel Prizes; her husband Pierre shared the first one.',
    },
  ]);
  t.same(await contents('The Eiffel Tower, built in 1889, is in Paris, but it was controversial at first.'), [
    'The Eiffel Tower, built in 1889, is in Paris.',
    'The Eiffel Tower was controversial at first.',
  ]);
  t.same(await contents('Radium glows in the dark, and the Curies kept samples by their bed.'), [
    'Radium glows in the dark.',
    'The Curies kept samples by their bed.',
  ]);
  for (const whole of [
    'Marie Curie studied physics, chemistry, and mathematics.',
    'Marie Curie was born in Warsaw, but moved to Paris in 1891.',
    'Although radium is rare, it is valuable, and laboratories still buy it.',
    'The notebooks (which are radioactive, and kept in lead boxes) are stored in Paris.',
    'Marie Curie discovered two elements, which she named polonium and radium.',
  ]) {
    t.same(await contents(whole), [whole], whole);
  }
});

t.test('drops boilerplate, questions, headings and fragments', async (t) => {
  const text = [
    'Click here to subscribe.',
    'Sign up for our newsletter today.',
    'Read more about the history of science.',
    'You can visit the museum every day of the week.',
    'We use cookies to improve your experience.',
    'All rights reserved © 2024 Example Media.',
    'Share this article on your favourite network.',
    'Who discovered radium?',
    'Why does radium glow in the dark?',
    'Photo gallery of the laboratory.',
    'It works.',
    'Marie Curie (1867–1934).',
    'Radium was discovered in 1898.',
    'The following elements are radioactive:',
  ].join(' ');
  t.same(await contents(text), ['Radium was discovered in 1898.']);
});

t.test('a Markdown document is read by the extractor: headings, link lists and menus carry no facts, and no syntax is left', async (t) => {
  const markdown = [
    '# Marie Curie',
    '## Early life',
    'Home | About | Contact',
    '- [Home](/)\n- [Physics](/physics)\n- [Chemistry](/chemistry)',
    'Marie Curie was born in **Warsaw** in 1867. She studied at a [secret university](https://example.org/flying) in _Warsaw_.',
    'Marie Curie Wins Second Nobel Prize',
    '- Paris is the capital of France\n- Lyon is a large city in France',
    '> Nothing in life is to be feared, it is only to be understood.',
    'Radium was *first isolated\nin 1910* by [Marie\nCurie](https://example.org/Curie_(name)).',
  ].join('\n\n');
  const expected = [
    'Marie Curie was born in Warsaw in 1867.',
    'Marie Curie studied at a secret university in Warsaw.',
    'Paris is the capital of France.',
    'Lyon is a large city in France.',
    'Nothing in life is to be feared, it is only to be understood.',
    'Radium was first isolated in 1910 by Marie Curie.',
  ];
  t.same(await documentFacts('text/markdown', markdown), expected);
  // What the document's escapes, code spans and references make text stays text: the model reads no Markdown.
  t.same(await documentFacts('text/markdown', 'The \\*very\\* first program ran in 1949. The `**kw**` marker &#42;stays&#42; in the manual.'), [
    'The *very* first program ran in 1949.',
    'The **kw** marker *stays* in the manual.',
  ]);
});

t.test('text/plain and HTML keep the characters Markdown would read: the model strips no syntax', async (t) => {
  const sentences = [
    'C# is a language that Microsoft released in 2000.',
    'Python calls __init__ when it creates an object.',
    'The file_name_here placeholder is replaced by the real name.',
    'Multiplying gives 2 * 3 = 6 in every case.',
    'The *very* first stored program ran in 1949.',
    'The letter said that the the [sic] results were final.',
    'The page [Curie](https://example.org/curie) describes her life.',
    '# of cases rose to 40 in 2020.',
    '> 5 people attended the first meeting.',
    'The `grep` command prints the lines that match a pattern.',
    'Windows writes the path C:\\Users\\ada with backslashes.',
  ];
  t.same(await documentFacts('text/plain', sentences.join('\n\n')), sentences, 'text/plain');
  const escaped = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  t.same(await documentFacts('text/html', `<html><body>${sentences.map((sentence) => `<p>${escaped(sentence)}</p>`).join('')}</body></html>`), sentences, 'HTML');
  // The same text read as Markdown is Markdown: its marks go, and `# of cases …` is a heading.
  t.same(await documentFacts('text/markdown', sentences.join('\n\n')), [
    'C# is a language that Microsoft released in 2000.',
    'Python calls init when it creates an object.',
    'The file_name_here placeholder is replaced by the real name.',
    'Multiplying gives 2 * 3 = 6 in every case.',
    'The very first stored program ran in 1949.',
    'The letter said that the the [sic] results were final.',
    'The page Curie describes her life.',
    'Of cases rose to 40 in 2020.',
    '5 people attended the first meeting.',
    'The grep command prints the lines that match a pattern.',
    'Windows writes the path C:\\Users\\ada with backslashes.',
  ], 'Markdown');
});

t.test('strips citation markers but keeps them in sourceText', async (t) => {
  const text =
    'Radium is a chemical element [1]. Radium emits alpha particles.[2][3] Radium was used in luminous paint.[citation needed] Polonium is named after Poland.[4] Curium is named after the Curies.[a]';
  const facts = await extractor.extractFacts({ text, chunkIndex: 0 });
  t.same(
    facts.map((fact) => fact.content),
    [
      'Radium is a chemical element.',
      'Radium emits alpha particles.',
      'Radium was used in luminous paint.',
      'Polonium is named after Poland.',
      'Curium is named after the Curies.',
    ],
  );
  t.equal(facts[0]?.sourceText, 'Radium is a chemical element [1].');
  t.ok(facts[1]?.sourceText.includes('[2][3]'), facts[1]?.sourceText);
  t.ok(facts.every((fact) => !/\[|\]/.test(fact.content)), 'no brackets left in content');
  // A Markdown document's citation links (as turndown writes Wikipedia's) are read by the extractor to their text.
  t.same(await documentFacts('text/markdown', 'Polonium is named after Poland.[\\[4\\]](#cite_note-4)'), ['Polonium is named after Poland.']);
});

t.test('joins hard-wrapped lines and keeps the original span as sourceText', async (t) => {
  const facts = await extractor.extractFacts({ text: 'Early life\nMarie Curie was born in\nWarsaw in 1867.', chunkIndex: 0 });
  t.same(facts, [{ content: 'Marie Curie was born in Warsaw in 1867.', sourceText: 'Marie Curie was born in\nWarsaw in 1867.' }]);
});

t.test('uses previousContext for the first sentence but extracts only from the chunk', async (t) => {
  t.same(await contents('She won two Nobel Prizes.', { previousContext: 'Marie Curie was a physicist. ' }), [
    'Marie Curie won two Nobel Prizes.',
  ]);
  t.same(
    await contents('icist in Paris. She won two Nobel Prizes.', { previousContext: 'Marie Curie was a phys' }),
    ['Marie Curie won two Nobel Prizes.'],
    'a sentence cut by the chunk start belongs to the previous chunk',
  );
  const facts = await extractor.extractFacts({
    text: 'Radium was discovered in 1898 by Marie',
    nextContext: ' Curie and Pierre Curie. It glows in the dark.',
    chunkIndex: 0,
  });
  t.same(
    facts,
    [
      {
        content: 'Radium was discovered in 1898 by Marie Curie and Pierre Curie.',
        sourceText: 'Radium was discovered in 1898 by Marie Curie and Pierre Curie.',
      },
    ],
    'a sentence cut by the chunk end is finished from nextContext; later ones are not extracted',
  );
});

t.test('drops a clause whose pronoun has no antecedent; the title can serve as one', async (t) => {
  t.same(await contents('She won two Nobel Prizes.'), []);
  t.same(await contents('She won two Nobel Prizes.', { title: 'Marie Curie - Wikipedia' }), ['Marie Curie won two Nobel Prizes.']);
  t.same(await contents('It is a city on the Seine.', { title: 'Paris | Travel guide' }), ['Paris is a city on the Seine.']);
  t.same(
    await contents('Marie Curie studied in Paris. She met Pierre there. He was a physicist.'),
    ['Marie Curie studied in Paris.', 'Marie Curie met Pierre there.'],
    'he never resolves to someone already called she',
  );
  t.same(await contents('The tower was finished in 1889. She was proud of it.'), ['The tower was finished in 1889.']);
  t.same(
    await contents('Marie Curie discovered radium. It is used in medicine.'),
    ['Marie Curie discovered radium.'],
    'it does not resolve to a person name',
  );
});

t.test('keeps dummy "it" and determiners', async (t) => {
  t.same(await contents('Radium is very rare. It is known that radium glows. It was not until 1910 that radium was isolated.'), [
    'Radium is very rare.',
    'It is known that radium glows.',
    'It was not until 1910 that radium was isolated.',
  ]);
  t.same(await contents('Radium is very rare. This discovery changed physics forever.'), [
    'Radium is very rare.',
    'This discovery changed physics forever.',
  ]);
  t.same(await contents('Radium is rare.'), [], 'fewer than four words is too short to be a fact');
});

t.test('copes with odd input', async (t) => {
  for (const odd of ['', '   \n\n\t', '!!! ??? ...', '[', '( [ {', '😀😀😀', '- \n- \n#', '[1][2][3]', '**', '\u0000\u0001']) {
    t.same(await contents(odd), [], JSON.stringify(odd));
  }
  const longSentence = `Radium ${'and polonium '.repeat(400)}were discovered in 1898.`;
  t.equal((await contents(longSentence)).length, 1, 'a very long sentence is one fact');
  const unpunctuated = 'radium polonium uranium thorium '.repeat(200);
  t.type(await contents(unpunctuated), Array);
  t.same(await contents('東京は日本の首都です。'), [], 'non-English text yields nothing rather than garbage');
  t.same(await contents('Marie Curie was born in Warsaw.', { title: '' }), ['Marie Curie was born in Warsaw.'], 'blank title');
  t.same(await contents('Marie Curie was born in Warsaw.', { title: null }), ['Marie Curie was born in Warsaw.'], 'null title');
});

t.test('rejects bad input and aborted calls', async (t) => {
  await t.rejects(extractor.extractFacts({ text: 42 as unknown as string, chunkIndex: 0 }), TypeError);
  await t.rejects(extractor.extractFacts(undefined as unknown as FactExtractionInput), TypeError);
  const controller = new AbortController();
  controller.abort(new Error('job timed out'));
  await t.rejects(extractor.extractFacts({ text: 'Radium is rare.', chunkIndex: 0 }, controller.signal), { message: 'job timed out' });
});

t.test('is deterministic and keeps text order', async (t) => {
  const text = longArticle();
  const first = await extractor.extractFacts({ text, chunkIndex: 0 });
  const second = await createLocalFactExtractor().extractFacts({ text, chunkIndex: 0 });
  t.same(first, second);
  t.ok(first.length > 50);
  // Facts of one sentence share its sourceText, so the search stays at the last match.
  let from = 0;
  const outOfOrder = first.filter((fact) => {
    const at = text.indexOf(fact.sourceText, from);
    if (at === -1) return true;
    from = at;
    return false;
  });
  t.same(outOfOrder, [], 'every sourceText is found, in text order');
});

t.test("character references are the extractor's to decode: plain text keeps them as written", async (t) => {
  const { extractDocument } = await import('../../../src/providers/fetch/extract.js');
  const { createLocalChatModel } = await import('../../../src/providers/llm/local.js');
  const chat = createLocalChatModel();
  const factsOf = async (contentType: string, body: string) => {
    const { text } = await extractDocument({ body: Buffer.from(body), contentType });
    return (await chat.extractFacts({ text, chunkIndex: 0 })).map((fact) => fact.content);
  };
  t.same(await factsOf('text/plain', 'AT&amp;T sold its &lt;b&gt; tags to Bell&#39;s company in 1984.'), ['AT&amp;T sold its &lt;b&gt; tags to Bell&#39;s company in 1984.'], 'text/plain');
  t.same(await factsOf('text/html', '<html><body><p>AT&amp;T sold its &lt;b&gt; tags to Bell&#39;s company, not &amp;amp; ones, in 1984.</p></body></html>'), [
    "AT&T sold its <b> tags to Bell's company, not &amp; ones, in 1984.",
  ], 'HTML: decoded once, by its DOM');
  t.same(await factsOf('text/markdown', 'AT&amp;T sold its `&lt;b&gt;` tags to Bell&#39;s company in 1984.'), [
    "AT&T sold its &lt;b&gt; tags to Bell's company in 1984.",
  ], 'Markdown: decoded in text, not in a code span');
  t.same(await contents('AT&amp;T was founded by Alexander Graham Bell in 1885.'), ['AT&amp;T was founded by Alexander Graham Bell in 1885.'], 'the model itself decodes nothing');
});
