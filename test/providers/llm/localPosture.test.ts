import t from 'tap';
import { judgePosturesLocally, localPosture, wordSimilarity } from '../../../src/providers/llm/localPosture.js';

const FACT = 'In 1911, Marie Curie won the Nobel Prize in Chemistry.';

t.test('the built-in posture rule says only what the words show', async (t) => {
  t.equal(localPosture('Marie Curie won the Nobel Prize in Chemistry in 1911, her second.', FACT), 'supports', 'every content word, same polarity');
  t.equal(localPosture('Marie Curie did not win the Nobel Prize in Chemistry in 1911.', FACT), 'contradicts', 'negated, the fact is not');
  t.equal(localPosture("Marie Curie didn't win the Nobel Prize in Chemistry.", FACT), 'contradicts', "n't is a negation");
  t.equal(localPosture('Marie Curie never won a Nobel Prize in Chemistry.', 'Marie Curie never won a Nobel Prize in Chemistry.'), 'supports', 'both negated');
  t.equal(localPosture('In 1903, Marie Curie won the Nobel Prize in Physics.', FACT), 'related', 'another prize: the rule cannot tell');
  t.equal(localPosture('Marie Curie won the Nobel Prize in Chemistry in 1912.', FACT), 'related', 'a changed year is beyond the rule');
  t.equal(localPosture('Coffee grows in the highlands of Ethiopia.', FACT), 'irrelevant', 'no shared content word');
  t.equal(localPosture('Anything at all.', 'It is what it is.'), 'irrelevant', 'a fact of stop words only');
});

t.test('judgements leave irrelevant facts out, in input order', async (t) => {
  const judged = judgePosturesLocally({
    sentence: 'Marie Curie did not win the Nobel Prize in Chemistry in 1911.',
    facts: [
      { id: 'coffee', content: 'Coffee grows in Ethiopia.' },
      { id: 'chemistry', content: FACT },
      { id: 'born', content: 'Marie Curie was born in Warsaw.' },
    ],
  });
  t.same(judged, [
    { factId: 'chemistry', posture: 'contradicts' },
    { factId: 'born', posture: 'related' },
  ]);
});

t.test('word-set similarity', async (t) => {
  t.equal(wordSimilarity(FACT, 'Marie Curie won the Nobel Prize in Chemistry in 1911.'), 1);
  t.equal(wordSimilarity(FACT, 'Coffee grows in Ethiopia.'), 0);
  t.equal(wordSimilarity('', FACT), 0);
  const partial = wordSimilarity(FACT, 'Marie Curie won the Nobel Prize in Physics in 1903.');
  t.ok(partial > 0.5 && partial < 1, `partial overlap ${partial}`);
});
