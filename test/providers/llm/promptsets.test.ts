import { createHash } from 'node:crypto';
import t from 'tap';
import {
  BUILT_IN_PROMPTSET_HASH,
  builtInPromptset,
  effectivePromptset,
  HASHED_PROMPT_PHASES,
  PROMPT_PHASES,
  promptsetHash,
} from '../../../src/providers/llm/promptsets.js';

/**
 * Pinned: the built-in promptset's hash is what producers emit and what pullers accept by
 * default (spec, "promptset_hash contract"). Changing a built-in shared prompt changes it, on
 * purpose; update this constant (and note it in the changelog) when that is intended.
 */
const PINNED_BUILT_IN_HASH = '60177dd025f069378fe63a124a13fb88e6619fb3ff1eb57c70d18d6adb2a4025';

t.test('the built-in promptset has a real prompt for every phase', async (t) => {
  const builtIn = builtInPromptset();
  t.same(Object.keys(builtIn.phases).sort(), [...PROMPT_PHASES].sort());
  for (const phase of PROMPT_PHASES) {
    const text = builtIn.phases[phase];
    t.ok(text.length > 200, `${phase} is a real prompt`);
    t.match(text, /one JSON object/, `${phase} asks for JSON`);
  }
  t.same(builtIn.overridden, []);
  t.equal(builtIn.hash, BUILT_IN_PROMPTSET_HASH);
});

t.test('the built-in hash is stable (pinned)', async (t) => {
  t.equal(BUILT_IN_PROMPTSET_HASH, PINNED_BUILT_IN_HASH);
  t.match(BUILT_IN_PROMPTSET_HASH, /^[0-9a-f]{64}$/);
  t.equal(promptsetHash(builtInPromptset().phases), PINNED_BUILT_IN_HASH, 'recomputing gives the same hash');
});

t.test('the hash follows the documented encoding', async (t) => {
  const phases = { fact_extraction: 'a', image_fact_extraction: 'bé', concept_extraction: '', refinement: 'line\nbreak' };
  // docs/providers.md: for each shared phase in order, "<phase>\n<UTF-8 byte length>\n<text>\n".
  const expected = createHash('sha256')
    .update('fact_extraction\n1\na\nimage_fact_extraction\n3\nbé\nconcept_extraction\n0\n\nrefinement\n10\nline\nbreak\n', 'utf8')
    .digest('hex');
  t.equal(promptsetHash(phases), expected);
  t.same([...HASHED_PROMPT_PHASES], ['fact_extraction', 'image_fact_extraction', 'concept_extraction', 'refinement']);
});

t.test('moving text between phases changes the hash (the encoding is unambiguous)', async (t) => {
  const a = promptsetHash({ fact_extraction: 'ab', image_fact_extraction: 'c', concept_extraction: 'd', refinement: 'e' });
  const b = promptsetHash({ fact_extraction: 'a', image_fact_extraction: 'bc', concept_extraction: 'd', refinement: 'e' });
  const c = promptsetHash({ fact_extraction: 'a\nimage_fact_extraction\n1\nb', image_fact_extraction: 'c', concept_extraction: 'd', refinement: 'e' });
  t.not(a, b);
  t.not(a, c);
  t.not(b, c);
});

t.test('overriding a shared phase changes the hash', async (t) => {
  for (const phase of HASHED_PROMPT_PHASES) {
    const promptset = effectivePromptset({ [phase]: `Custom ${phase} prompt. Answer with JSON.` });
    t.not(promptset.hash, BUILT_IN_PROMPTSET_HASH, `${phase} is hashed`);
    t.same(promptset.overridden, [phase]);
    t.equal(promptset.phases[phase], `Custom ${phase} prompt. Answer with JSON.`);
  }
});

t.test('overriding a local-only phase does not change the hash', async (t) => {
  for (const phase of ['synthesis', 'summarization', 'posture', 'image_picker'] as const) {
    const promptset = effectivePromptset({ [phase]: 'Something else entirely.' });
    t.equal(promptset.hash, BUILT_IN_PROMPTSET_HASH, `${phase} is not hashed`);
    t.same(promptset.overridden, [phase]);
    t.equal(promptset.phases[phase], 'Something else entirely.');
  }
});

t.test('effectivePromptset: null, blank and unknown overrides fall back to the built-in', async (t) => {
  t.same(effectivePromptset(null), builtInPromptset());
  t.same(effectivePromptset(undefined), builtInPromptset());
  t.same(effectivePromptset({ fact_extraction: null, refinement: '   ', retired_phase: 'x' }), builtInPromptset());
  const two = effectivePromptset({ posture: 'P', concept_extraction: 'C' });
  t.same(two.overridden, ['concept_extraction', 'posture'], 'in phase order');
  t.equal(two.hash, promptsetHash({ ...builtInPromptset().phases, concept_extraction: 'C' }));
  t.equal(effectivePromptset({ fact_extraction: builtInPromptset().phases.fact_extraction }).hash, BUILT_IN_PROMPTSET_HASH, 'same text, same hash');
});
