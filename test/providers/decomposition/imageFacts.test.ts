import t from 'tap';

import { decomposeDocument } from '../../../src/providers/decomposition/decompose.js';
import { extractSourceImageFacts, surroundingTextFor } from '../../../src/providers/decomposition/imageFacts.js';
import type { ExtractedFact, FactExtractor } from '../../../src/providers/llm/port.js';
import { builtInPromptset } from '../../../src/providers/llm/promptsets.js';
import { recordingChatModel } from '../../helpers/decompositionHarness.js';

t.test('surroundingTextFor finds an image by URL, else by alt text', async (t) => {
  const markdown = [
    '# Otters',
    'Sea otters use **rocks** as [tools](https://example.org/tools).',
    '![Population chart](https://example.org/chart.png "Population")',
    'The population recovered after 1911.',
    '![Inline sketch](data:image/png;base64,AAAA)',
    'The end.',
  ].join('\n\n');
  t.equal(
    surroundingTextFor(markdown, { url: 'https://example.org/chart.png', alt_text: 'ignored' }),
    'Otters Sea otters use rocks as tools. … The population recovered after 1911. The end.',
    'markup and other images are left out',
  );
  t.equal(surroundingTextFor(markdown, { url: null, alt_text: 'Inline sketch' }), 'Otters Sea otters use rocks as tools. The population recovered after 1911. … The end.');
  t.equal(surroundingTextFor(markdown, { url: 'https://example.org/other.png', alt_text: null }), null);
  t.equal(surroundingTextFor(null, { url: 'https://example.org/chart.png', alt_text: null }), null);
  const long = `${'word '.repeat(500)}![x](https://e.org/x.png)${' more'.repeat(500)}`;
  const around = surroundingTextFor(long, { url: 'https://e.org/x.png', alt_text: 'x' }) ?? '';
  t.ok(around.length <= 300 * 2 + 3, 'at most 300 characters each side');
  // An emoji where either cut falls is left out whole: half of one (a lone surrogate) is no Unicode.
  const emoji = `${'x'.repeat(400)}😀${'y'.repeat(299)}![x](https://e.org/x.png)${'z'.repeat(299)}😀${'w'.repeat(400)}`;
  t.equal(surroundingTextFor(emoji, { url: 'https://e.org/x.png', alt_text: 'x' }), `${'y'.repeat(299)} … ${'z'.repeat(299)}`);
});

t.test('extractSourceImageFacts: order, hashing, blind models, failures', async (t) => {
  const images = [
    { image_id: 'img-0-a', sha256: 'a', content_type: 'image/png', url: null, alt_text: 'A chart', caption: 'Figure 1' },
    { image_id: 'img-1-b', sha256: 'b', content_type: 'image/png', url: null, alt_text: null, caption: null },
  ];
  const loads: string[] = [];
  const loadBytes = async (sha: string) => {
    loads.push(sha);
    return Buffer.from(sha.repeat(10));
  };
  const seeing = recordingChatModel({ canSeeImages: true });
  const facts = await extractSourceImageFacts({ images, loadBytes, chat: seeing.model, concurrency: 2, promptset: builtInPromptset() });
  t.same(
    facts.map((fact) => [fact.imageId, fact.content]),
    [
      ['img-0-a', 'The source has a figure captioned "Figure 1".'],
      ['img-0-a', 'An image of the source shows A chart.'],
      ['img-1-b', 'The source has an image of 10 bytes.'],
    ],
  );
  t.equal(seeing.imageCalls[0]?.promptset?.hash, builtInPromptset().hash);

  const blind = recordingChatModel({ canSeeImages: false });
  loads.length = 0;
  const blindFacts = await extractSourceImageFacts({ images, loadBytes, chat: blind.model, concurrency: 2 });
  t.same(blindFacts.map((fact) => fact.imageId), ['img-0-a', 'img-0-a'], 'a wordless image is not asked about');
  t.same(loads, ['a'], 'nor loaded');

  const failing = { ...seeing.model, extractImageFacts: async () => Promise.reject(new Error('boom')) };
  await t.rejects(extractSourceImageFacts({ images, loadBytes, chat: failing, concurrency: 1 }), { message: 'boom' });
  t.same(await extractSourceImageFacts({ images: [], loadBytes, chat: seeing.model, concurrency: 4 }), []);
});

t.test('decomposeDocument: sentence index from the model, else from the source text', async (t) => {
  const text = 'Otters are mammals. They live in the sea. Rocks are tools for otters.';
  const extractor: FactExtractor = {
    modelId: 'test/sentences',
    async extractFacts(): Promise<ExtractedFact[]> {
      return [
        { content: 'Otters are mammals.', sourceText: 'Otters are mammals.', sentenceIndex: 7 },
        { content: 'Otters live in the sea.', sourceText: 'They live in the sea.' },
        { content: 'Rocks are tools for otters.', sourceText: 'Rocks are tools' },
        { content: 'Otters are cute.', sourceText: 'not in the text' },
      ];
    },
  };
  const result = await decomposeDocument({ text }, extractor, undefined, undefined, { concurrency: 4 });
  t.same(result.facts.map((fact) => fact.sentenceIndex), [7, 1, 2, -1]);
});
