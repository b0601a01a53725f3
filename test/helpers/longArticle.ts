/**
 * Realistic prose for the decomposition tests, built from templates so a long document has
 * many distinct facts (about 10,000 characters for `longArticle()`).
 */

interface Element {
  name: string;
  symbol: string;
  number: number;
  discoverer: string;
  pronoun: 'He' | 'She';
  year: number;
  city: string;
  country: string;
  use: string;
}

const ELEMENTS: Element[] = [
  { name: 'Radium', symbol: 'Ra', number: 88, discoverer: 'Marie Curie', pronoun: 'She', year: 1898, city: 'Paris', country: 'France', use: 'luminous paint' },
  { name: 'Polonium', symbol: 'Po', number: 84, discoverer: 'Pierre Curie', pronoun: 'He', year: 1898, city: 'Paris', country: 'France', use: 'static eliminators' },
  { name: 'Helium', symbol: 'He', number: 2, discoverer: 'William Ramsay', pronoun: 'He', year: 1895, city: 'London', country: 'England', use: 'cryogenics' },
  { name: 'Oxygen', symbol: 'O', number: 8, discoverer: 'Carl Scheele', pronoun: 'He', year: 1771, city: 'Uppsala', country: 'Sweden', use: 'steelmaking' },
  { name: 'Hafnium', symbol: 'Hf', number: 72, discoverer: 'Dirk Coster', pronoun: 'He', year: 1923, city: 'Copenhagen', country: 'Denmark', use: 'control rods' },
  { name: 'Rhenium', symbol: 'Re', number: 75, discoverer: 'Ida Noddack', pronoun: 'She', year: 1925, city: 'Berlin', country: 'Germany', use: 'jet engines' },
  { name: 'Francium', symbol: 'Fr', number: 87, discoverer: 'Marguerite Perey', pronoun: 'She', year: 1939, city: 'Paris', country: 'France', use: 'research' },
  { name: 'Argon', symbol: 'Ar', number: 18, discoverer: 'Lord Rayleigh', pronoun: 'He', year: 1894, city: 'London', country: 'England', use: 'welding' },
  { name: 'Lithium', symbol: 'Li', number: 3, discoverer: 'Johan Arfwedson', pronoun: 'He', year: 1817, city: 'Stockholm', country: 'Sweden', use: 'batteries' },
  { name: 'Neon', symbol: 'Ne', number: 10, discoverer: 'Morris Travers', pronoun: 'He', year: 1898, city: 'London', country: 'England', use: 'advertising signs' },
  { name: 'Uranium', symbol: 'U', number: 92, discoverer: 'Martin Klaproth', pronoun: 'He', year: 1789, city: 'Berlin', country: 'Germany', use: 'nuclear fuel' },
  { name: 'Thorium', symbol: 'Th', number: 90, discoverer: 'Jöns Berzelius', pronoun: 'He', year: 1829, city: 'Stockholm', country: 'Sweden', use: 'gas mantles' },
  { name: 'Cobalt', symbol: 'Co', number: 27, discoverer: 'Georg Brandt', pronoun: 'He', year: 1735, city: 'Stockholm', country: 'Sweden', use: 'magnets' },
];

function section(e: Element, i: number): string {
  const possessive = e.pronoun === 'She' ? 'her' : 'his';
  const prose = [
    `${e.name} is a chemical element with the symbol ${e.symbol} and atomic number ${e.number}.[${i + 1}]`,
    `Its atomic number is ${e.number}, which sets the number of protons in the nucleus.`,
    `It was first identified in ${e.year} by ${e.discoverer}, who worked in ${e.city}.`,
    `${e.discoverer} was a respected scientist in ${e.country}.`,
    `${e.pronoun} published the discovery in a short paper; ${possessive} colleagues repeated the experiment within a year.`,
    `In ${e.year + 2}, ${e.pronoun.toLowerCase()} presented the results to the academy of sciences in ${e.city}.`,
    `${capitalize(possessive)} notebooks are kept in a museum in ${e.city}.`,
    `The **${e.name.toLowerCase()}** sample in that museum weighs ${e.number} grams.`,
    `Today the element is used in ${e.use}, and its price depends on the purity of the sample.`,
    `Why does it matter?`,
    `Click here to read more about ${e.name.toLowerCase()}.`,
  ].join(' ');
  const links = [`- [Wikipedia](https://en.wikipedia.org/wiki/${e.name})`, `- [Periodic table](/table#${e.symbol})`].join('\n');
  return `## ${e.name}\n\n${prose}\n\n${links}`;
}

function capitalize(word: string): string {
  return word.charAt(0).toUpperCase() + word.slice(1);
}

/** About 10,000 characters: headings, navigation, prose with citations, questions, boilerplate. */
export function longArticle(): string {
  const sections = ELEMENTS.map(section);
  return ['Home | Elements | About us', ...sections, 'All rights reserved.'].join('\n\n');
}
