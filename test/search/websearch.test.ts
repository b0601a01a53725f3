import t from 'tap';
import { websearchToSimpleQueryString } from '../../src/search/opensearch/query.js';
import { websearchQueryText } from '../../src/search/port.js';
import { parseWebsearch } from '../../src/search/websearch.js';

// The translation to OpenSearch's syntax needs no node: its cases run in the unit suite.
t.test('websearch syntax becomes simple_query_string syntax', async (t) => {
  const cases: [string, string | null][] = [
    ['cats', '(cats)'],
    ['cats dogs', '(cats + dogs)'],
    ['cats or dogs', '(cats) | (dogs)'],
    ['cats OR dogs birds', '(cats) | (dogs + birds)'],
    ['"solar power" plants', '("solar power" + plants)'],
    ['-dogs cats', '(-dogs + cats)'],
    ['cats -"big dogs"', '(cats + -"big dogs")'],
    ['"unterminated phrase', '("unterminated phrase")'],
    ['or cats or', '(cats)'],
    ['cats or or dogs', '(cats) | (dogs)'],
    ['a*b (c) ~d +e |f well-known x\\y', '(a\\*b + \\(c\\) + \\~d + \\+e + \\|f + well\\-known + x\\\\y)'],
    ['cats - dogs', '(cats + dogs)'],
    ['-', null],
    ['"" or', null],
    ['   ', null],
    ['-or', '(-or)'],
  ];
  for (const [input, expected] of cases) t.equal(websearchToSimpleQueryString(input), expected, JSON.stringify(input));
});

t.test('the terms of a query, as the vector side of hybrid search reads them', async (t) => {
  t.same(parseWebsearch('puppy -dogs or "big cats" -"small dogs"'), [
    [
      { text: 'puppy', phrase: false, negated: false },
      { text: 'dogs', phrase: false, negated: true },
    ],
    [
      { text: 'big cats', phrase: true, negated: false },
      { text: 'small dogs', phrase: true, negated: true },
    ],
  ]);
  t.same(parseWebsearch('!!! () "" or -'), [], 'no term');
});

t.test('a sign attached to no term is a dash; a run before a term negates once or not at all', async (t) => {
  t.equal(websearchQueryText('cats - dogs'), 'cats  dogs');
  t.equal(websearchQueryText('- cats -'), ' cats ');
  t.equal(websearchQueryText('cats - -dogs'), 'cats  -dogs');
  t.equal(websearchQueryText('cats ---dogs'), 'cats -dogs');
  t.equal(websearchQueryText('cats --dogs'), 'cats  dogs');
  t.equal(websearchQueryText('well-known -x'), 'well-known -x', 'a hyphen inside a word stays');
  t.equal(websearchQueryText('Zu\u0308rich'), 'Z\u00fcrich');
});
