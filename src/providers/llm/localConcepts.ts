import type {
  ConceptCandidate,
  ConceptContextChoice,
  ConceptExtractionInput,
  RefinementDecision,
  RefinementInput,
} from './port.js';

/**
 * Concepts for the built-in chat model (DESIGN.md, "Providers"): rule-based, deterministic, on
 * wink-nlp's part-of-speech tags. A concept is a named entity (a run of proper nouns: persons,
 * organizations, places, awards, works, events) or a salient common noun phrase ("X-ray
 * crystallography", "radioactivity", "polonium"). Each gets a context from the repository's
 * allowed contexts only, aliases seen in the facts (a person's surname, an acronym and its
 * expansion, "the X", the plural) and the ids of the facts that mention it.
 *
 * The output depends only on the set of facts given, not on their order: concepts, aliases and
 * fact ids are sorted. Refinement (`refineLocalConcepts`) merges concepts whose names differ only
 * in case, punctuation, article or number, or whose name is another's alias, and prunes noisy
 * aliases; its decisions are deterministic too.
 */

/** What the tagger gives for one token (the shape `local.ts` tags sentences into). */
export interface TaggedToken {
  value: string;
  /** Lower-cased value. */
  normal: string;
  /** Universal part-of-speech tag ("PROPN", "NOUN", "ADJ", ...). */
  pos: string;
  /** Whether whitespace precedes the token. */
  spaced: boolean;
}

/** Splits a text into sentences of tagged tokens. */
export type SentenceTagger = (text: string) => Array<{ tokens: TaggedToken[] }>;

type EntityClass = 'person' | 'organization' | 'location' | 'award' | 'chemical' | 'work' | 'event' | 'method' | 'disease' | 'entity' | 'topic';

// ---------------------------------------------------------------------------------------------
// Word lists

const AWARD_WORDS = new Set(['prize', 'prizes', 'award', 'awards', 'medal', 'trophy', 'laureateship']);
const ORGANIZATION_WORDS = new Set([
  'university', 'universities', 'institute', 'institution', 'academy', 'college', 'school', 'society', 'company',
  'corporation', 'corp', 'corp.', 'inc', 'inc.', 'ltd', 'ltd.', 'llc', 'gmbh', 'plc', 'association', 'foundation',
  'council', 'committee', 'agency', 'laboratory', 'laboratories', 'labs', 'department', 'ministry', 'bank', 'party',
  'organization', 'organisation', 'hospital', 'museum', 'press', 'group', 'center', 'centre', 'club', 'team',
  'league', 'federation', 'commission', 'office', 'bureau', 'board', 'observatory', 'library', 'clinic', 'faculty',
  'consortium', 'network', 'authority', 'administration', 'institutes', 'industries', 'technologies', 'systems',
]);
const LOCATION_WORDS = new Set([
  'river', 'mountain', 'mountains', 'mount', 'lake', 'ocean', 'sea', 'island', 'islands', 'valley', 'street', 'road',
  'avenue', 'city', 'county', 'province', 'republic', 'kingdom', 'empire', 'bay', 'desert', 'forest', 'park',
  'peninsula', 'coast', 'region', 'district', 'canyon', 'gulf', 'strait', 'plateau', 'square',
]);
const WORK_WORDS = new Set(['treatise', 'book', 'novel', 'symphony', 'opera', 'journal', 'magazine', 'newspaper', 'gazette', 'encyclopedia', 'encyclopaedia']);
const EVENT_WORDS = new Set(['war', 'revolution', 'conference', 'olympics', 'games', 'expedition', 'battle', 'congress', 'summit', 'festival', 'crisis', 'pandemic', 'epidemic']);
const PERSON_TITLES = new Set([
  'dr', 'dr.', 'mr', 'mr.', 'mrs', 'mrs.', 'ms', 'ms.', 'prof', 'prof.', 'professor', 'sir', 'dame', 'madame', 'mme',
  'mme.', 'lord', 'lady', 'king', 'queen', 'prince', 'princess', 'president', 'pope', 'saint',
]);
const PLACE_PREFIXES = new Set(['new', 'san', 'santa', 'los', 'las', 'st', 'st.', 'mount', 'cape', 'port', 'fort', 'north', 'south', 'east', 'west', 'upper', 'lower', 'great', 'united']);
const KNOWN_PLACES = new Set(
  (
    'afghanistan albania algeria argentina armenia australia austria belgium bolivia brazil bulgaria canada chile ' +
    'china colombia croatia cuba cyprus czechia denmark ecuador egypt england estonia ethiopia finland france ' +
    'georgia germany ghana greece hungary iceland india indonesia iran iraq ireland israel italy japan jordan kenya ' +
    'korea latvia lebanon lithuania luxembourg malaysia mexico morocco nepal netherlands nigeria norway pakistan ' +
    'peru philippines poland portugal romania russia scotland serbia singapore slovakia slovenia spain sweden ' +
    'switzerland syria taiwan thailand tunisia turkey ukraine uruguay venezuela vietnam wales yemen zimbabwe ' +
    'africa antarctica asia europe america oceania arctic ' +
    'paris london berlin rome madrid vienna warsaw prague budapest moscow tokyo beijing shanghai delhi mumbai cairo ' +
    'athens lisbon dublin amsterdam brussels copenhagen stockholm oslo helsinki geneva zurich munich hamburg milan ' +
    'naples venice florence barcelona boston chicago cambridge oxford edinburgh manchester toronto montreal sydney ' +
    'melbourne seoul istanbul jerusalem baghdad tehran kyiv kiev krakow lyon marseille'
  ).split(' '),
);
const CHEMICAL_ELEMENTS = new Set(
  (
    'hydrogen helium lithium beryllium boron carbon nitrogen oxygen fluorine neon sodium magnesium aluminium aluminum ' +
    'silicon phosphorus sulfur sulphur chlorine argon potassium calcium scandium titanium vanadium chromium manganese ' +
    'iron cobalt nickel copper zinc gallium germanium arsenic selenium bromine krypton rubidium strontium yttrium ' +
    'zirconium niobium molybdenum technetium ruthenium rhodium palladium silver cadmium indium tin antimony tellurium ' +
    'iodine xenon caesium cesium barium lanthanum cerium praseodymium neodymium promethium samarium europium ' +
    'gadolinium terbium dysprosium holmium erbium thulium ytterbium lutetium hafnium tantalum tungsten rhenium osmium ' +
    'iridium platinum gold mercury thallium lead bismuth polonium astatine radon francium radium actinium thorium ' +
    'protactinium uranium neptunium plutonium americium curium berkelium californium einsteinium fermium mendelevium ' +
    'nobelium lawrencium rutherfordium dubnium seaborgium bohrium hassium meitnerium darmstadtium roentgenium ' +
    'copernicium nihonium flerovium moscovium livermorium tennessine oganesson'
  ).split(' '),
);
const CHEMICAL_HEADS = new Set(['acid', 'oxide', 'dioxide', 'chloride', 'sulfate', 'sulphate', 'nitrate', 'hydroxide', 'carbonate', 'salt', 'compound', 'isotope', 'isotopes', 'alloy', 'molecule']);
const METHOD_HEADS = new Set(['method', 'technique', 'analysis', 'spectroscopy', 'crystallography', 'microscopy', 'chromatography', 'tomography', 'imaging', 'sequencing', 'assay', 'algorithm', 'procedure', 'protocol', 'experiment']);
const METHOD_SUFFIXES = ['graphy', 'metry', 'scopy'];
const DISEASE_HEADS = new Set(['disease', 'cancer', 'syndrome', 'disorder', 'infection', 'fever', 'leukemia', 'leukaemia', 'anemia', 'anaemia', 'tuberculosis', 'diabetes', 'malaria', 'influenza']);
const DISEASE_SUFFIXES = ['itis', 'emia', 'aemia', 'oma'];
/** Single common nouns this technical are concepts on their own ("radioactivity", "genetics"). */
const TECHNICAL_SUFFIXES = ['ity', 'ism', 'ology', 'graphy', 'metry', 'scopy', 'osis', 'itis', 'emia', 'ase', 'ide', 'cillin', 'mycin', 'ics', 'ene'];
/** Nouns too general to be a concept, alone or as the head of a phrase of general words. */
const GENERIC_NOUNS = new Set(
  (
    'year years time times work works part parts way ways thing things number numbers people person man men woman ' +
    'women day days month months week weeks century centuries decade decades age life lives world place places ' +
    'kind kinds type types lot lots group groups case cases point points fact facts example examples end side ' +
    'area areas form forms use uses result results member members other others one ones first second third ' +
    'beginning start half rest term terms name names home family children child son daughter wife husband ' +
    'father mother brother sister friend friends job jobs level levels amount amounts order reason reasons ' +
    'question questions problem problems idea ideas information data item items system way course field fields ' +
    'study studies research paper papers article articles book books image images picture photo photograph ' +
    'city country state town village region today tomorrow yesterday period moment ' +
    'activity quality ability majority community authority capacity variety security identity opportunity entity ' +
    'quantity priority personality reality possibility responsibility facility city university ' +
    'side inside outside top bottom front back middle rise fall lead'
  ).split(' '),
);
const MONTHS_AND_DAYS = new Set(
  'january february march april may june july august september october november december monday tuesday wednesday thursday friday saturday sunday'.split(' '),
);
const NAME_CONNECTORS = new Set(['of', 'for', 'de', 'du', 'des', 'von', 'van', 'der', 'den', 'la', 'le', 'da', 'di', 'del', 'y', '&', 'and', 'on']);
const PRONOUNS = new Set(['i', 'me', 'we', 'us', 'you', 'he', 'him', 'she', 'her', 'it', 'they', 'them', 'this', 'that', 'these', 'those', 'who', 'which', 'what']);
/** Adjectives that classify rather than describe: "nuclear physics", "radioactive element". */
const CLASSIFYING_ADJECTIVE = /(ic|al|ar|ary|ive|ous|ian|ial|ical|ine)$/;
const DESCRIPTIVE_ADJECTIVES = new Set([
  'several', 'total', 'general', 'final', 'original', 'local', 'usual', 'actual', 'real', 'equal', 'major', 'similar',
  'various', 'famous', 'previous', 'serious', 'obvious', 'numerous', 'enormous', 'curious', 'dangerous', 'active',
  'effective', 'extensive', 'expensive', 'massive', 'positive', 'negative', 'primary', 'necessary', 'ordinary',
  'particular', 'popular', 'regular', 'typical', 'critical', 'special', 'initial', 'additional', 'potential',
  'essential', 'crucial', 'principal', 'formal', 'normal', 'natural', 'central', 'personal', 'professional',
  'historical', 'practical', 'basic', 'specific', 'economic', 'public', 'tragic', 'dramatic', 'fantastic',
  'early', 'late', 'famous', 'own', 'first', 'second', 'new', 'old', 'many', 'other', 'such', 'same', 'only',
]);

// ---------------------------------------------------------------------------------------------
// Mentions

interface Mention {
  /** The name as it will be shown: "Marie Curie", "X-ray crystallography". */
  name: string;
  klass: EntityClass;
  /** Other surface forms seen at this mention: "the Royal Society", "elements", "MIT". */
  aliases: string[];
  kind: 'named' | 'common' | 'acronym' | 'bare';
  /** For persons: the surname ("Curie") and the first name ("Marie"). */
  surname?: string;
  firstName?: string;
}

function isCapitalized(value: string): boolean {
  return /^\p{Lu}/u.test(value);
}

function isAcronym(value: string): boolean {
  return /^[A-Z][A-Z0-9&]{1,9}s?$/.test(value) && /[A-Z].*[A-Z]/.test(value);
}

/** A token that can be part of a proper name at position `i` of its sentence. */
function isNameToken(tokens: TaggedToken[], i: number): boolean {
  const token = tokens[i];
  if (token === undefined || !/\p{L}/u.test(token.value) || !isCapitalized(token.value)) return false;
  if (PRONOUNS.has(token.normal) || token.pos === 'DET' || token.pos === 'ADP' || token.pos === 'CCONJ') return false;
  if (token.pos === 'PROPN') return true;
  // A capitalized noun inside a sentence is part of a name ("St Mary's Hospital").
  return i > 0 && token.pos === 'NOUN';
}

function joinTokens(tokens: TaggedToken[]): string {
  return tokens.map((token, i) => (i > 0 && token.spaced ? ' ' : '') + token.value).join('');
}

function singular(word: string): string {
  const lower = word.toLowerCase();
  if (lower.length <= 3 || /(ss|us|is|ics|ous|sis|news|series|species|ium)$/.test(lower)) return word;
  if (lower.endsWith('ies') && lower.length > 4) return `${word.slice(0, -3)}y`;
  if (/(ches|shes|xes|zes|sses)$/.test(lower)) return word.slice(0, -2);
  if (lower.endsWith('s')) return word.slice(0, -1);
  return word;
}

function endsWithAny(word: string, suffixes: readonly string[]): boolean {
  return suffixes.some((suffix) => word.length > suffix.length + 2 && word.endsWith(suffix));
}

/** Letters of `acronym` found in order in `expansion`, the first at its first word's start. */
function acronymMatches(acronym: string, expansion: string): boolean {
  const letters = acronym.replace(/[^A-Za-z]/g, '').toLowerCase().replace(/s$/, '');
  const words = expansion.toLowerCase().split(/[\s-]+/).filter((word) => word !== '' && !NAME_CONNECTORS.has(word) && word !== 'the');
  if (letters.length < 2 || words.length === 0 || words[0]?.[0] !== letters[0]) return false;
  const initials = words.map((word) => word[0]).join('');
  if (initials === letters) return true;
  // Loosely: "deoxyribonucleic acid" for DNA; every letter in order, the last in the last word.
  const text = words.join(' ');
  let at = 0;
  for (const letter of letters) {
    const found = text.indexOf(letter, at);
    if (found === -1) return false;
    at = found + 1;
  }
  const lastWordStart = text.lastIndexOf(' ') + 1;
  return at - 1 >= lastWordStart;
}

function classifyNamed(words: string[], afterPlacePreposition: boolean): EntityClass {
  const lower = words.map((word) => word.toLowerCase());
  if (lower.some((word) => AWARD_WORDS.has(word))) return 'award';
  if (lower.some((word) => ORGANIZATION_WORDS.has(word))) return 'organization';
  if (lower.some((word) => WORK_WORDS.has(word))) return 'work';
  if (lower.some((word) => EVENT_WORDS.has(word))) return 'event';
  if (lower.length === 1 && CHEMICAL_ELEMENTS.has(lower[0] as string)) return 'chemical';
  if (lower.some((word) => LOCATION_WORDS.has(word)) || PLACE_PREFIXES.has(lower[0] as string)) return 'location';
  if (lower.length === 1 && KNOWN_PLACES.has(lower[0] as string)) return 'location';
  if (lower.every((word) => KNOWN_PLACES.has(word))) return 'location';
  if (lower.length >= 2 && lower.length <= 4 && !lower.some((word) => NAME_CONNECTORS.has(word))) return 'person';
  if (afterPlacePreposition && lower.length <= 3) return 'location';
  return 'entity';
}

function classifyCommon(words: string[]): EntityClass {
  const head = (words.at(-1) ?? '').toLowerCase();
  const singularHead = singular(head).toLowerCase();
  if (words.length === 1 && CHEMICAL_ELEMENTS.has(singularHead)) return 'chemical';
  if (CHEMICAL_HEADS.has(head) || CHEMICAL_HEADS.has(singularHead)) return 'chemical';
  if (METHOD_HEADS.has(singularHead) || endsWithAny(singularHead, METHOD_SUFFIXES)) return 'method';
  if (DISEASE_HEADS.has(singularHead) || endsWithAny(singularHead, DISEASE_SUFFIXES)) return 'disease';
  return 'topic';
}

/** Whether a common noun phrase is worth a concept: technical, compound, or a chemical element. */
function isSalientCommon(words: string[]): boolean {
  const lower = words.map((word) => word.toLowerCase());
  const head = singular(lower.at(-1) ?? '');
  if (lower.some((word) => word.length < 2 || /^\d/.test(word) || PRONOUNS.has(word))) return false;
  if (lower.length === 1) {
    if (GENERIC_NOUNS.has(head) || GENERIC_NOUNS.has(lower[0] as string) || head.length < 4) return false;
    return CHEMICAL_ELEMENTS.has(head) || endsWithAny(head, TECHNICAL_SUFFIXES) || DISEASE_HEADS.has(head) || METHOD_HEADS.has(head);
  }
  // A compound of general words ("the end of the year") is no concept; one specific word makes it one.
  return lower.some((word) => !GENERIC_NOUNS.has(singular(word)) && !DESCRIPTIVE_ADJECTIVES.has(word)) && !GENERIC_NOUNS.has(lower.join(' '));
}

/** How the batch writes its words inside sentences, where capitals mean names. */
interface BatchWords {
  lowercaseWords: ReadonlySet<string>;
  capitalizedWords: ReadonlySet<string>;
}

const CUE_WORDS = new Set([...AWARD_WORDS, ...ORGANIZATION_WORDS, ...WORK_WORDS]);

/** The mentions in one sentence. */
function mentionsInSentence(tokens: TaggedToken[], batch: BatchWords): Mention[] {
  const mentions: Mention[] = [];
  const used = new Array<boolean>(tokens.length).fill(false);
  /** "Massachusetts Institute of Technology (MIT)": the acronym right after a name is its alias. */
  const withAcronym = (mention: Mention, after: number): Mention => {
    const acronym = tokens[after]?.value === '(' && tokens[after + 2]?.value === ')' ? tokens[after + 1]?.value : undefined;
    if (acronym !== undefined && isAcronym(acronym) && acronymMatches(acronym, mention.name)) {
      mention.aliases.push(acronym);
      used[after + 1] = true;
    }
    return mention;
  };

  // Named entities: runs of capitalized tokens with inner connectors ("University of Paris").
  for (let i = 0; i < tokens.length; i++) {
    if (used[i] || !isNameToken(tokens, i)) continue;
    let end = i + 1;
    for (;;) {
      if (isNameToken(tokens, end)) {
        end++;
        continue;
      }
      const connector = tokens[end];
      const connectable =
        connector !== undefined &&
        (NAME_CONNECTORS.has(connector.normal) || connector.normal === "'s" ||
          (connector.normal === 'in' && tokens.slice(i, end).some((token) => AWARD_WORDS.has(token.normal))));
      // "Marie and Pierre Curie" is two persons, not one name: "and" joins names only in organizations.
      const joinsNames = connector?.normal !== 'and' || tokens.slice(i, end).some((token) => ORGANIZATION_WORDS.has(token.normal));
      const skipThe = tokens[end + 1]?.normal === 'the' ? 1 : 0;
      // "Copley Medal of the Royal Society" is an award and an organization, not one name.
      let continuation = end + 1 + skipThe;
      while (isNameToken(tokens, continuation)) continuation++;
      const namesAnother =
        CUE_WORDS.has(tokens[end - 1]?.normal ?? '') &&
        tokens.slice(end + 1, continuation).some((token) => ORGANIZATION_WORDS.has(token.normal));
      if (connectable && joinsNames && !namesAnother && isNameToken(tokens, end + 1 + skipThe)) {
        end += 2 + skipThe;
        continue;
      }
      break;
    }
    let run = tokens.slice(i, end);
    for (let k = i; k < end; k++) used[k] = true;
    const article = tokens[i - 1]?.normal === 'the';
    const preposition = ['in', 'at', 'near', 'from'].includes(tokens[i - 1]?.normal ?? '');

    // "X-ray crystallography": a hyphenated capitalized word that modifies a common noun; and
    // "Deoxyribonucleic acid" opening a sentence, unless the batch writes the word as a name.
    const modifiesNoun = tokens[end]?.pos === 'NOUN' && !isCapitalized(tokens[end]?.value ?? '');
    const initialCommon =
      i === 0 && !batch.capitalizedWords.has(run[0]?.normal ?? '') && !KNOWN_PLACES.has(run[0]?.normal ?? '') && !isAcronym(run[0]?.value ?? '');
    if (run.length === 1 && modifiesNoun && (run[0]?.value.includes('-') || initialCommon)) {
      let nounEnd = end;
      while (tokens[nounEnd]?.pos === 'NOUN' && !isCapitalized(tokens[nounEnd]?.value ?? '')) nounEnd++;
      const phrase = tokens.slice(i, nounEnd);
      for (let k = end; k < nounEnd; k++) used[k] = true;
      const mention = commonMention(phrase, i === 0);
      if (mention !== null) mentions.push(withAcronym(mention, nounEnd));
      continue;
    }

    // A sentence-initial single capitalized word is a common noun when the batch writes it so,
    // or it is an element or a technical term ("Polonium is", "Radioactivity was").
    if (run.length === 1 && i === 0 && !isAcronym(run[0]?.value ?? '')) {
      const word = run[0]?.normal ?? '';
      if (batch.lowercaseWords.has(word) || CHEMICAL_ELEMENTS.has(word) || endsWithAny(word, TECHNICAL_SUFFIXES)) {
        const mention = commonMention(run, true);
        if (mention !== null) mentions.push(mention);
        continue;
      }
    }

    // Titles make a person and are not part of the name: "Dr. Alexander Fleming".
    let titled = false;
    while (run.length > 1 && PERSON_TITLES.has(run[0]?.normal ?? '')) {
      run = run.slice(1);
      titled = true;
    }
    const words = run.map((token) => token.value);
    const name = joinTokens(run).replace(/\s+'s\b/g, "'s");
    if (words.length === 1) {
      const value = words[0] as string;
      if (value.length < 2 || MONTHS_AND_DAYS.has(value.toLowerCase()) || PRONOUNS.has(value.toLowerCase())) continue;
      if (isAcronym(value)) {
        mentions.push({ name: value, klass: 'entity', aliases: [], kind: 'acronym' });
        continue;
      }
    }
    if (words.every((word) => MONTHS_AND_DAYS.has(word.toLowerCase()))) continue;
    let klass = titled ? 'person' : classifyNamed(words, preposition);
    // "Curies", "Curie": maybe a person named elsewhere in the batch; resolved after all facts are read.
    const bare = words.length === 1 && (klass === 'entity' || klass === 'location') && !KNOWN_PLACES.has(words[0]?.toLowerCase() ?? '');
    if (titled && words.length === 1) klass = 'person';
    const mention: Mention = { name, klass, aliases: [], kind: bare || (titled && words.length === 1) ? 'bare' : 'named' };
    if (titled && words.length === 1) mention.aliases.push(joinTokens(tokens.slice(i, end)));
    if (klass === 'person' && words.length >= 2) {
      mention.surname = words.at(-1);
      mention.firstName = words[0];
      mention.aliases.push(words.at(-1) as string);
    }
    if (article && (klass === 'organization' || klass === 'award' || klass === 'work' || klass === 'event')) {
      mention.aliases.push(`the ${name}`);
    }
    mentions.push(withAcronym(mention, end));
  }

  // "Marie and Pierre Curie": the first name before "and" shares the surname of the name after it.
  for (let i = 0; i + 3 < tokens.length; i++) {
    const first = tokens[i];
    if (first?.pos !== 'PROPN' || tokens[i + 1]?.normal !== 'and' || isNameToken(tokens, i - 1)) continue;
    let end = i + 2;
    while (isNameToken(tokens, end)) end++;
    const following = tokens.slice(i + 2, end).map((token) => token.value);
    if (following.length < 2 || classifyNamed(following, false) !== 'person' || classifyNamed([first.value], false) !== 'entity') continue;
    const surname = following.at(-1) as string;
    const index = mentions.findIndex((mention) => mention.kind === 'bare' && mention.name === first.value);
    if (index !== -1) mentions.splice(index, 1);
    mentions.push({ name: `${first.value} ${surname}`, klass: 'person', aliases: [surname], kind: 'named', surname, firstName: first.value });
  }

  // Common noun phrases: runs of nouns, with classifying adjectives in front.
  for (let i = 0; i < tokens.length; i++) {
    if (used[i] || tokens[i]?.pos !== 'NOUN') continue;
    let start = i;
    while (start > 0 && !used[start - 1] && tokens[start - 1]?.pos === 'ADJ' && isClassifying(tokens[start - 1] as TaggedToken)) start--;
    let end = i;
    while (end < tokens.length && !used[end] && tokens[end]?.pos === 'NOUN' && (end === 0 || !isCapitalized(tokens[end]?.value ?? '') || end === start)) end++;
    for (let k = start; k < end; k++) used[k] = true;
    const phrase = tokens.slice(start, end);
    const mention = commonMention(phrase, start === 0);
    if (mention !== null) mentions.push(withAcronym(mention, end));
    i = end - 1;
  }
  return mentions;
}

function isClassifying(token: TaggedToken): boolean {
  return !isCapitalized(token.value) && CLASSIFYING_ADJECTIVE.test(token.normal) && !DESCRIPTIVE_ADJECTIVES.has(token.normal);
}

/** "radioactive elements" → "radioactive element" with alias "radioactive elements". */
function commonMention(phrase: TaggedToken[], sentenceInitial: boolean): Mention | null {
  const words = phrase.map((token, k) => {
    const keepCase = /\p{Lu}/u.test(token.value.slice(1)) || (token.value.includes('-') && isCapitalized(token.value)) || isAcronym(token.value);
    return keepCase || (k > 0 && isCapitalized(token.value) && !(sentenceInitial && k === 0)) ? token.value : token.value.toLowerCase();
  });
  if (!isSalientCommon(words)) return null;
  const surface = words.join(' ');
  const singularWords = [...words.slice(0, -1), singular(words.at(-1) as string)];
  const name = singularWords.join(' ');
  return { name, klass: classifyCommon(singularWords), aliases: surface !== name ? [surface] : [], kind: 'common' };
}

// ---------------------------------------------------------------------------------------------
// Contexts

const CONTEXT_PREFERENCES: Record<EntityClass, string[]> = {
  person: ['person', 'people', 'persons', 'individual', 'researcher', 'scientist', 'author', 'agent'],
  organization: ['organization', 'organisation', 'organizations', 'institution', 'company', 'org', 'agent'],
  location: ['location', 'place', 'places', 'geography', 'country', 'city', 'region'],
  award: ['award', 'awards', 'prize', 'honor', 'honour', 'recognition', 'event'],
  chemical: ['chemical', 'chemicals', 'compound', 'element', 'substance', 'material', 'molecule'],
  work: ['work', 'creative_work', 'publication', 'document', 'book'],
  event: ['event', 'events', 'occurrence'],
  method: ['method', 'methods', 'technique', 'process', 'procedure'],
  disease: ['disease', 'diseases', 'condition', 'illness', 'disorder'],
  entity: [],
  topic: [],
};
/** Where a concept goes when no context names its class. */
const GENERIC_CONTEXTS = ['topic', 'concept', 'field', 'subject', 'domain', 'term', 'general', 'thing', 'entity', 'other', 'finding'];

function chooseContext(klass: EntityClass, contexts: readonly ConceptContextChoice[]): string {
  const byLower = new Map<string, string>();
  for (const context of contexts) {
    const key = context.name.toLowerCase();
    if (!byLower.has(key)) byLower.set(key, context.name);
  }
  for (const preferred of [...CONTEXT_PREFERENCES[klass], ...GENERIC_CONTEXTS]) {
    const found = byLower.get(preferred);
    if (found !== undefined) return found;
  }
  return contexts[0]?.name as string;
}

// ---------------------------------------------------------------------------------------------
// Extraction

interface Gathered {
  names: Map<string, number>;
  klass: EntityClass;
  aliases: Set<string>;
  factIds: string[];
}

const CLASS_PRIORITY: EntityClass[] = ['person', 'organization', 'award', 'chemical', 'location', 'work', 'event', 'method', 'disease', 'topic', 'entity'];

export function extractLocalConcepts(input: ConceptExtractionInput, tag: SentenceTagger): ConceptCandidate[] {
  if (!Array.isArray(input?.facts)) throw new TypeError('extractConcepts expects input.facts to be an array');
  if (!Array.isArray(input.contexts) || input.contexts.length === 0) throw new TypeError('extractConcepts expects at least one allowed context');
  for (const fact of input.facts) {
    if (typeof fact?.id !== 'string' || typeof fact.content !== 'string') throw new TypeError('every fact needs a string id and content');
  }
  const tagged = input.facts.map((fact) => ({ id: fact.id, sentences: tag(fact.content).map((sentence) => sentence.tokens) }));
  // Words the batch writes in lower case somewhere: "Polonium" opening a sentence is the element.
  const lowercaseWords = new Set<string>();
  const capitalizedWords = new Set<string>();
  for (const fact of tagged) {
    for (const tokens of fact.sentences) {
      tokens.forEach((token, i) => {
        if (i > 0 && /^\p{Ll}/u.test(token.value)) lowercaseWords.add(token.normal);
        if (i > 0 && isCapitalized(token.value)) capitalizedWords.add(token.normal);
      });
    }
  }
  const batch: BatchWords = { lowercaseWords, capitalizedWords };
  const perFact = tagged.map((fact) => ({
    id: fact.id,
    mentions: fact.sentences.flatMap((tokens) => mentionsInSentence(tokens, batch)),
  }));

  // Persons by surname and first name, and acronyms by expansion, across the batch.
  const surnames = new Map<string, Set<string>>();
  const firstNames = new Map<string, Set<string>>();
  const acronyms = new Map<string, Set<string>>();
  for (const { mentions } of perFact) {
    for (const mention of mentions) {
      const key = mention.name.toLowerCase();
      if (mention.klass === 'person' && mention.surname !== undefined) {
        addTo(surnames, mention.surname.toLowerCase(), key);
        if (mention.firstName !== undefined) addTo(firstNames, mention.firstName.toLowerCase(), key);
      }
      for (const alias of mention.aliases) if (isAcronym(alias)) addTo(acronyms, alias, key);
    }
  }
  const unique = (map: Map<string, Set<string>>, key: string): string | null => {
    const found = map.get(key);
    return found !== undefined && found.size === 1 ? ([...found][0] as string) : null;
  };

  const gathered = new Map<string, Gathered>();
  for (const { id, mentions } of perFact) {
    for (const mention of mentions) {
      let key = mention.name.toLowerCase();
      const aliases = [...mention.aliases];
      let klass = mention.klass;
      let name = mention.name;
      if (mention.kind === 'bare' || mention.kind === 'acronym') {
        const word = mention.name.toLowerCase();
        const plural = word.endsWith('s') ? word.slice(0, -1) : null;
        const target =
          mention.kind === 'acronym'
            ? unique(acronyms, mention.name)
            : (unique(surnames, word) ?? unique(firstNames, word) ?? null);
        if (target !== null) {
          aliases.push(...(mention.aliases.length > 0 ? mention.aliases : [mention.name]));
          key = target;
          // The named mention elsewhere gives the name and the class.
          name = '';
          klass = 'entity';
        } else if (
          (plural !== null && surnames.has(plural)) ||
          surnames.has(word) ||
          firstNames.has(word)
        ) {
          // "the Curies", or a surname two persons of the batch share: no one concept is meant.
          continue;
        }
      }
      const entry = gathered.get(key) ?? { names: new Map<string, number>(), klass, aliases: new Set<string>(), factIds: [] };
      if (name !== '') entry.names.set(name, (entry.names.get(name) ?? 0) + 1);
      if (CLASS_PRIORITY.indexOf(klass) < CLASS_PRIORITY.indexOf(entry.klass) && name !== '') entry.klass = klass;
      for (const alias of aliases) entry.aliases.add(alias);
      if (!entry.factIds.includes(id)) entry.factIds.push(id);
      gathered.set(key, entry);
    }
  }

  const candidates: ConceptCandidate[] = [];
  for (const entry of gathered.values()) {
    // A concept seen only through aliases (an acronym whose expansion is elsewhere) still has a name.
    const names = [...entry.names.entries()].sort((a, b) => b[1] - a[1] || b[0].length - a[0].length || compare(a[0], b[0]));
    const canonicalName = names[0]?.[0] ?? [...entry.aliases].sort(compare)[0];
    if (canonicalName === undefined) continue;
    const aliasSeen = new Set<string>([canonicalName.toLowerCase()]);
    const aliases: string[] = [];
    for (const alias of [...entry.aliases, ...names.slice(1).map(([other]) => other)].sort(compare)) {
      if (aliasSeen.has(alias.toLowerCase())) continue;
      aliasSeen.add(alias.toLowerCase());
      aliases.push(alias);
    }
    // Sorted, not in input order: two workers given the facts in another order agree.
    const factIds = [...entry.factIds].sort(compare);
    candidates.push({
      canonicalName,
      context: chooseContext(entry.klass, input.contexts),
      ontologyClass: entry.klass === 'entity' ? null : entry.klass,
      aliases,
      factIds,
    });
  }
  return candidates.sort((a, b) => compare(a.context, b.context) || compare(a.canonicalName.toLowerCase(), b.canonicalName.toLowerCase()) || compare(a.canonicalName, b.canonicalName));
}

function addTo(map: Map<string, Set<string>>, key: string, value: string): void {
  const set = map.get(key) ?? new Set<string>();
  set.add(value);
  map.set(key, set);
}

/** Code-unit order: the same in every locale. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Refinement

/** "The X-Rays." and "x-ray" compare equal: case, punctuation, a leading article and plural ignored. */
export function nameKey(name: string): string {
  const words = name
    .toLowerCase()
    .replace(/[’']s\b/g, '')
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim()
    .split(' ')
    .filter((word) => word !== '');
  if (words[0] === 'the' && words.length > 1) words.shift();
  const last = words.pop();
  if (last !== undefined) words.push(singular(last));
  return words.join(' ');
}

const MIN_ALIAS_LENGTH = 3;

export function refineLocalConcepts(input: RefinementInput): RefinementDecision[] {
  if (!Array.isArray(input?.concepts)) throw new TypeError('refineConcepts expects input.concepts to be an array');
  if (!Number.isFinite(input.pruneThreshold)) throw new TypeError('refineConcepts expects a numeric pruneThreshold');
  const decisions: RefinementDecision[] = [];
  const byContext = new Map<string, RefinementInput['concepts'][number][]>();
  for (const concept of input.concepts) {
    const key = concept.context.toLowerCase();
    byContext.set(key, [...(byContext.get(key) ?? []), concept]);
  }
  for (const key of [...byContext.keys()].sort(compare)) {
    decisions.push(...refineContext(byContext.get(key) ?? [], input.pruneThreshold));
  }
  // Merges first (by loser id), then alias removals (by concept id and alias).
  const sortKey = (decision: RefinementDecision): string =>
    decision.type === 'merge' ? `0\u0000${decision.loserId}` : `1\u0000${decision.conceptId}\u0000${decision.alias}`;
  return decisions.sort((a, b) => compare(sortKey(a), sortKey(b)));
}

type RefinedConcept = RefinementInput['concepts'][number];

function refineContext(concepts: RefinedConcept[], pruneThreshold: number): RefinementDecision[] {
  const sorted = [...concepts].sort((a, b) => compare(a.id, b.id));
  const parent = new Map<string, string>(sorted.map((concept) => [concept.id, concept.id]));
  const find = (id: string): string => {
    let root = id;
    while (parent.get(root) !== root) root = parent.get(root) as string;
    return root;
  };
  const reasons = new Map<string, string>();
  const union = (a: RefinedConcept, b: RefinedConcept, reason: string): void => {
    const rootA = find(a.id);
    const rootB = find(b.id);
    if (rootA === rootB) return;
    parent.set(rootA > rootB ? rootA : rootB, rootA > rootB ? rootB : rootA);
    // The first match that joined a concept to its group explains its merge.
    if (!reasons.has(a.id)) reasons.set(a.id, reason);
    if (!reasons.has(b.id)) reasons.set(b.id, reason);
  };

  // Same name up to case, punctuation, article and plural.
  const byName = new Map<string, RefinedConcept[]>();
  for (const concept of sorted) {
    const key = nameKey(concept.canonicalName);
    byName.set(key, [...(byName.get(key) ?? []), concept]);
  }
  for (const group of byName.values()) {
    for (const other of group.slice(1)) {
      union(group[0] as RefinedConcept, other, `"${other.canonicalName}" and "${group[0]?.canonicalName}" differ only in case, punctuation, article or number`);
    }
  }
  // A name that is another concept's alias, when only one concept carries that alias.
  const byAlias = new Map<string, RefinedConcept[]>();
  for (const concept of sorted) {
    for (const alias of new Set(concept.aliases.map(nameKey))) byAlias.set(alias, [...(byAlias.get(alias) ?? []), concept]);
  }
  for (const concept of sorted) {
    const owners = (byAlias.get(nameKey(concept.canonicalName)) ?? []).filter((owner) => owner.id !== concept.id);
    const distinct = new Set(owners.map((owner) => find(owner.id)));
    if (distinct.size === 1 && owners[0] !== undefined) {
      union(concept, owners[0], `"${concept.canonicalName}" is an alias of "${owners[0].canonicalName}"`);
    }
  }

  const groups = new Map<string, RefinedConcept[]>();
  for (const concept of sorted) groups.set(find(concept.id), [...(groups.get(find(concept.id)) ?? []), concept]);
  const decisions: RefinementDecision[] = [];
  const survivorOf = new Map<string, string>();
  for (const members of groups.values()) {
    const survivor = [...members].sort(
      (a, b) => b.factCount - a.factCount || b.canonicalName.length - a.canonicalName.length || compare(a.id, b.id),
    )[0] as RefinedConcept;
    for (const member of members) {
      survivorOf.set(member.id, survivor.id);
      if (member.id === survivor.id) continue;
      const reason = reasons.get(member.id) ?? `"${member.canonicalName}" names the same thing as "${survivor.canonicalName}"`;
      decisions.push({ type: 'merge', loserId: member.id, survivorId: survivor.id, reason });
    }
  }

  // Pruning: short aliases, and aliases another concept of the context also answers to.
  const removals: RefinementDecision[] = [];
  for (const concept of sorted) {
    if (survivorOf.get(concept.id) !== concept.id || concept.aliases.length < pruneThreshold) continue;
    const others = sorted.filter((other) => survivorOf.get(other.id) !== concept.id);
    for (const alias of [...new Set(concept.aliases)].sort(compare)) {
      const key = nameKey(alias);
      if (alias.replace(/[^\p{L}\p{N}]/gu, '').length < MIN_ALIAS_LENGTH) {
        removals.push({ type: 'remove_alias', conceptId: concept.id, alias, reason: 'shorter than 3 characters' });
        continue;
      }
      const sharer = others.find((other) => nameKey(other.canonicalName) === key || other.aliases.some((otherAlias) => nameKey(otherAlias) === key));
      if (sharer !== undefined) {
        removals.push({ type: 'remove_alias', conceptId: concept.id, alias, reason: `also names "${sharer.canonicalName}"` });
      }
    }
  }
  return [...decisions, ...removals];
}
