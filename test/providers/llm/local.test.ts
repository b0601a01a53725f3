import t from 'tap';
import { createLocalChatModel, createLocalFactExtractor } from '../../../src/providers/llm/local.js';
import type { ImageInput } from '../../../src/providers/llm/port.js';

const model = createLocalChatModel();

function image(extra: Partial<ImageInput>): ImageInput {
  return { bytes: new Uint8Array([137, 80, 78, 71]), contentType: 'image/png', ...extra };
}

t.test('text facts carry the index of their sentence in the chunk', async (t) => {
  const text = 'Marie Curie\n===========\n\nMarie Curie was a physicist. She won two Nobel Prizes. Was she French? Click here to subscribe. In 1891, she moved to Paris.';
  const facts = await model.extractFacts({ text, chunkIndex: 0 });
  t.same(facts, [
    { content: 'Marie Curie was a physicist.', sourceText: 'Marie Curie was a physicist.', sentenceIndex: 0 },
    { content: 'Marie Curie won two Nobel Prizes.', sourceText: 'She won two Nobel Prizes.', sentenceIndex: 1 },
    { content: 'In 1891, Marie Curie moved to Paris.', sourceText: 'In 1891, she moved to Paris.', sentenceIndex: 4 },
  ], 'skipped sentences (a question, a call to action) still count; the heading does not');

  const split = await model.extractFacts({ text: 'Radium glows in the dark, and polonium decays quickly. It is very rare in nature.', chunkIndex: 0 });
  t.same(split.map((fact) => fact.sentenceIndex), [0, 0, 1], 'clauses of one sentence share its index');

  const previous = 'Marie Curie was born in Warsaw. ';
  const continued = await model.extractFacts({ text: 'She moved to Paris in 1891. She studied physics at the Sorbonne.', previousContext: previous, chunkIndex: 1 });
  t.same(continued.map((fact) => [fact.content, fact.sentenceIndex]), [
    ['Marie Curie moved to Paris in 1891.', 0],
    ['Marie Curie studied physics at the Sorbonne.', 1],
  ], 'sentences of the previous context are not counted');
});

t.test('the plain fact extractor keeps its original output shape', async (t) => {
  const facts = await createLocalFactExtractor().extractFacts({ text: 'Marie Curie was a physicist.', chunkIndex: 0 });
  t.same(facts, [{ content: 'Marie Curie was a physicist.', sourceText: 'Marie Curie was a physicist.' }]);
  t.notOk('sentenceIndex' in (facts[0] ?? {}));
});

t.test('image facts come from the caption and alt text, as statements', async (t) => {
  t.same(await model.extractImageFacts(image({ altText: 'Marie Curie in her laboratory, 1904' })), [
    { content: 'An image shows Marie Curie in her laboratory in 1904.', sourceText: 'Marie Curie in her laboratory, 1904' },
  ]);
  t.same(await model.extractImageFacts(image({ caption: 'Photo of the Eiffel Tower at night' })), [
    { content: 'An image shows the Eiffel Tower at night.', sourceText: 'Photo of the Eiffel Tower at night' },
  ], 'a "Photo of" lead is dropped');
  t.same(await model.extractImageFacts(image({ caption: 'A diagram of the human heart (c. 1890)' })), [
    { content: 'An image shows the human heart in 1890.', sourceText: 'A diagram of the human heart (c. 1890)' },
  ]);
  t.same(
    await model.extractImageFacts(image({ altText: 'Marie Curie', caption: 'Marie Curie in her Paris laboratory (1904)' })),
    [{ content: 'An image shows Marie Curie in her Paris laboratory in 1904.', sourceText: 'Marie Curie in her Paris laboratory (1904)' }],
    'alt text repeated in the caption adds nothing',
  );
  t.same(
    await model.extractImageFacts(image({ caption: 'She works in her laboratory in 1904.', sourceTitle: 'Marie Curie - Wikipedia' })),
    [{ content: 'Marie Curie works in her laboratory in 1904.', sourceText: 'She works in her laboratory in 1904.' }],
    'a caption that is a sentence stands, its pronoun resolved by the source title',
  );
  t.same(
    await model.extractImageFacts(image({ altText: 'Pierre Curie', caption: 'The Radium Institute in Paris' })),
    [
      { content: 'An image shows the Radium Institute in Paris.', sourceText: 'The Radium Institute in Paris' },
      { content: 'An image shows Pierre Curie.', sourceText: 'Pierre Curie' },
    ],
    'caption first, then a different alt text',
  );
});

t.test('nothing usable next to an image gives no facts', async (t) => {
  for (const altText of ['', '   ', 'IMG_2034.jpg', 'DSC_0042', 'marie_curie_1904', 'header-bg', 'logo', 'Image', 'click here', 'https://example.org/a.png', 'photo.jpeg', null]) {
    t.same(await model.extractImageFacts(image({ altText })), [], `alt ${JSON.stringify(altText)}`);
  }
  t.same(await model.extractImageFacts(image({ surroundingText: 'Marie Curie was a physicist.' })), [],
    'text around the image is decomposed as text, not again as an image fact');
  await t.rejects(model.extractImageFacts(null as unknown as ImageInput), TypeError);
  const controller = new AbortController();
  controller.abort(new Error('stopped'));
  await t.rejects(model.extractImageFacts(image({ altText: 'Marie Curie' }), controller.signal), { message: 'stopped' });
  await t.rejects(model.extractFacts({ text: 'x', chunkIndex: 0 }, controller.signal), { message: 'stopped' });
});
