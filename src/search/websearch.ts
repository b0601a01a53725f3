/**
 * The websearch syntax users write (docs/search.md, "Query syntax"), read into its terms as
 * websearch_to_tsquery reads it: the OpenSearch translation and the vector side of hybrid search
 * both start from this, so all three read a query alike.
 */

/** A word or a "quoted phrase" (without its quotes), and whether it is excluded (`-word`, `-"a phrase"`). */
export interface WebsearchTerm {
  text: string;
  phrase: boolean;
  negated: boolean;
}

/**
 * The terms of a query as groups: the terms of a group are ANDed, the groups ORed (`or` binds
 * looser than AND, as in tsquery). A leading, trailing or doubled `or` is ignored; a word with no
 * letter or digit and an empty phrase are left out (tsquery finds no lexeme in them); an
 * unterminated phrase runs to the end. Pass the text through websearchQueryText first.
 */
export function parseWebsearch(text: string): WebsearchTerm[][] {
  const groups: WebsearchTerm[][] = [[]];
  let pendingOr = false;
  let index = 0;
  while (index < text.length) {
    const char = text[index];
    if (/\s/.test(char)) {
      index += 1;
      continue;
    }
    let negated = false;
    if (char === '-' && index + 1 < text.length && !/\s/.test(text[index + 1])) {
      negated = true;
      index += 1;
    }
    let term: WebsearchTerm;
    if (text[index] === '"') {
      const end = text.indexOf('"', index + 1);
      const inner = text.slice(index + 1, end < 0 ? text.length : end).trim();
      index = end < 0 ? text.length : end + 1;
      if (inner === '') continue;
      term = { text: inner, phrase: true, negated };
    } else {
      let end = index;
      while (end < text.length && !/\s/.test(text[end]) && text[end] !== '"') end += 1;
      const word = text.slice(index, end);
      index = end;
      if (!negated && word.toLowerCase() === 'or') {
        if (groups[groups.length - 1].length > 0) pendingOr = true;
        continue;
      }
      if (!/[\p{L}\p{N}]/u.test(word)) continue; // punctuation only: no lexeme
      term = { text: word, phrase: false, negated };
    }
    if (pendingOr) {
      groups.push([]);
      pendingOr = false;
    }
    groups[groups.length - 1].push(term);
  }
  return groups.filter((group) => group.length > 0);
}
