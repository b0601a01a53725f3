import t from 'tap';
import { mergeAliases, memberSpellings } from '../../src/search/collection.js';
import { concepts } from '../../src/search/collections/index.js';
import { scriptsOf, updateActions } from '../../src/search/opensearch/bulk.js';
import { normaliseDocuments, normaliseUpdates } from '../../src/search/port.js';

/**
 * List members (concepts' aliases) in the search index are names: compared by the domain's key
 * (conceptNameKey), so a name typed composed and decomposed is one alias there as in the read model.
 */

const composed = 'Caf\u00e9';
const decomposed = 'Cafe\u0301';

t.test('mergeAliases: one member per conceptNameKey, spelt composed', async (t) => {
  t.same(mergeAliases([decomposed], [composed, 'CAFÉ', ' '], []), [composed], 'the decomposed spelling kept, composed; the others are the same name');
  t.same(mergeAliases(['Le Café', 'Bistro'], [], ['le cafe\u0301']), ['Bistro'], 'a removal in the other spelling removes it');
  t.same(mergeAliases([], ['T\u0308'], ['\u1e97']), [], 'a capital with no composed form is the key of its lower-case letter');
});

t.test('documents and updates reach an adapter with their members spelt and deduplicated by the key', async (t) => {
  const [document] = normaliseDocuments(
    concepts,
    [{ id: 'c1', repository_id: 'r1', canonical_name: 'Flore', context: 'place', aliases: [decomposed, composed], fact_count: 0, status: 'active' }],
    null,
  );
  t.same(document.aliases, [composed]);
  const [update] = normaliseUpdates(concepts, [{ id: 'c1', repository_id: 'r1', addTo: { aliases: [composed, decomposed] } }], null);
  t.same(update.addTo, { aliases: [composed] });
});

t.test('the OpenSearch update script is given every spelling a stored member of the same key may have', async (t) => {
  const [action] = updateActions(concepts, scriptsOf(concepts), [
    { id: 'c1', repository_id: 'r1', addTo: { aliases: [composed] }, removeFrom: { aliases: ['LE CAFÉ'] } },
  ]);
  const params = (action.lines[1] as { script: { params: { add: { aliases: Array<{ member: string; spellings: string[] }> }; remove: { aliases: string[] } } } }).script.params;
  t.same(params.add.aliases.map((added) => added.member), [composed]);
  // The script lower-cases each stored member and looks it up among these: the comparison it makes, here.
  const scriptFinds = (spellings: readonly string[], stored: string) => spellings.includes(stored.toLowerCase());
  for (const stored of [composed, decomposed, 'CAFE\u0301', 'café']) {
    t.ok(scriptFinds(params.add.aliases[0].spellings, stored), `an added ${JSON.stringify(stored)} is found stored`);
  }
  t.notOk(scriptFinds(params.add.aliases[0].spellings, 'Cafe'), 'a name without the accent is another name');
  for (const stored of ['Le Café', 'le cafe\u0301']) t.ok(scriptFinds(params.remove.aliases, stored), `a removal finds ${JSON.stringify(stored)}`);
  t.ok(scriptFinds(memberSpellings('\u1e97'), 'T\u0308'), 'a capital with no composed form');
  t.match(scriptsOf(concepts).update, /aliasesGone\.contains\(aliasesList\.get\(i\)\.toLowerCase\(\)\)/, 'the script compares as simulated');
  t.match(scriptsOf(concepts).update, /a\['spellings'\]\.contains\(x\.toLowerCase\(\)\)/);
});
