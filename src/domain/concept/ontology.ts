import type { ConceptContextChoice } from '../../providers/llm/port.js';
import { findPreset } from '../repository/presets.js';

/**
 * The built-in ontology levels: the contexts a concept may belong to. A preset picks some of
 * them (`all` = every level) and may add custom contexts; a repository may add its own.
 */
export const ONTOLOGY_LEVELS: readonly ConceptContextChoice[] = [
  { name: 'person', description: 'A real or fictional individual human being.' },
  { name: 'organization', description: 'A company, institution, agency, team or other organised group.' },
  { name: 'location', description: 'A place: a country, city, region, building, landmark or geographic feature.' },
  { name: 'event', description: 'Something that happened at a time: a war, election, conference, disaster or discovery.' },
  { name: 'work', description: 'A creative or intellectual work: a book, paper, film, song, artwork or law text.' },
  { name: 'product', description: 'A commercial good, device, service or software product offered by someone.' },
  { name: 'technology', description: 'A technique, tool, material or engineering capability in general.' },
  { name: 'method', description: 'A procedure, algorithm, protocol or experimental technique.' },
  { name: 'field', description: 'A discipline or area of study or practice (physics, law, machine learning).' },
  { name: 'topic', description: 'A subject, theme or abstract idea that fits no more specific level.' },
  { name: 'chemical', description: 'A chemical element, compound, drug or material substance.' },
  { name: 'organism', description: 'A species, strain or other living organism, including genes and proteins of it.' },
  { name: 'disease', description: 'A disease, disorder, syndrome, symptom or medical condition.' },
  { name: 'dataset', description: 'A named collection of data, corpus, benchmark or database.' },
  { name: 'finding', description: 'A result, observation or conclusion reported by a study or source.' },
  { name: 'process', description: 'A natural or business process: a sequence of steps or changes over time.' },
  { name: 'project', description: 'A planned undertaking with a goal: an initiative, programme or mission.' },
  { name: 'policy', description: 'A rule, regulation, law, guideline or official strategy.' },
  { name: 'award', description: 'A prize, honour, medal or recognition given to someone.' },
];

/** Descriptions of the presets' own custom contexts (presets list them by name only). */
const PRESET_CONTEXT_DESCRIPTIONS: Readonly<Record<string, string>> = {
  hypothesis: 'A proposed explanation or conjecture that research tests.',
  customer: 'A customer, client or account of the organisation.',
};

export function isOntologyLevel(name: string): boolean {
  const lower = name.trim().toLowerCase();
  return ONTOLOGY_LEVELS.some((level) => level.name === lower);
}

/**
 * The contexts concept extraction may assign in a repository, in this order: the preset's
 * ontology levels (every level for `all`, or for an unknown preset), the preset's custom
 * contexts, then the repository's custom contexts. Names compare case-insensitively; the
 * first occurrence wins. Never empty.
 */
export function allowedContexts(
  presetId: string,
  customContexts: ReadonlyArray<{ name: string; description: string }> = [],
): ConceptContextChoice[] {
  const preset = findPreset(presetId);
  const levels =
    !preset || preset.contexts.includes('all')
      ? ONTOLOGY_LEVELS
      : preset.contexts.flatMap((name) => ONTOLOGY_LEVELS.filter((level) => level.name === name));
  const presetCustom = (preset?.custom_contexts ?? []).map((name) => ({
    name,
    description: PRESET_CONTEXT_DESCRIPTIONS[name] ?? `A custom context of the ${preset?.label ?? presetId} preset.`,
  }));
  const choices: ConceptContextChoice[] = [];
  const seen = new Set<string>();
  for (const choice of [...levels, ...presetCustom, ...customContexts]) {
    const key = choice.name.trim().toLowerCase();
    if (key === '' || seen.has(key)) continue;
    seen.add(key);
    choices.push({ name: choice.name.trim(), description: choice.description });
  }
  return choices;
}

/** The allowed context named `name` (case-insensitively), or undefined. */
export function findAllowedContext(
  name: string,
  presetId: string,
  customContexts: ReadonlyArray<{ name: string; description: string }> = [],
): ConceptContextChoice | undefined {
  const lower = name.trim().toLowerCase();
  return allowedContexts(presetId, customContexts).find((choice) => choice.name.toLowerCase() === lower);
}
