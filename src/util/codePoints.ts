/**
 * Strings measured and cut by code point: a surrogate pair (an emoji, an astral-plane character)
 * is one character and is never cut in half. A lone half is not Unicode: no store keeps it, and
 * JSON Schema's `maxLength` counts the pair as one. Here, not in the domain, so util code (error
 * messages) cuts by the same rule as the domain does.
 */

/** Length in Unicode code points ("runes"), as JSON Schema's `maxLength` counts. */
export function runeLength(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** A cut of `text` at UTF-16 unit `at`, moved one unit back where it would separate a surrogate pair. */
export function avoidSplitPair(text: string, at: number): number {
  const before = text.charCodeAt(at - 1);
  return at > 0 && at < text.length && before >= 0xd800 && before <= 0xdbff ? at - 1 : at;
}

/**
 * The first `units` UTF-16 units of `text`, one fewer where the last would be the first half of
 * a surrogate pair.
 */
export function headOfUnits(text: string, units: number): string {
  return text.length <= units ? text : text.slice(0, avoidSplitPair(text, units));
}

/**
 * The last `units` UTF-16 units of `text`, one fewer where the first would be the second half of
 * a surrogate pair.
 */
export function tailOfUnits(text: string, units: number): string {
  if (text.length <= units) return text;
  const start = text.length - units;
  return text.slice(avoidSplitPair(text, start) === start ? start : start + 1);
}

/**
 * The first `runes` code points of `text` (all of it when it has no more): a bound counted in
 * characters, as JSON Schema's `maxLength` counts, that never keeps half of a pair.
 */
export function headOfRunes(text: string, runes: number): string {
  if (text.length <= runes) return text;
  let units = 0;
  let count = 0;
  for (const rune of text) {
    if (count === runes) break;
    units += rune.length;
    count += 1;
  }
  return text.slice(0, units);
}

/**
 * The last `runes` code points of `text` (all of it when it has no more): as headOfRunes, from
 * the end, never keeping half of a pair.
 */
export function tailOfRunes(text: string, runes: number): string {
  if (runes <= 0) return '';
  if (text.length <= runes) return text;
  let start = text.length;
  for (let count = 0; count < runes && start > 0; count++) {
    const low = text.charCodeAt(start - 1);
    const high = text.charCodeAt(start - 2);
    start -= low >= 0xdc00 && low <= 0xdfff && high >= 0xd800 && high <= 0xdbff ? 2 : 1;
  }
  return text.slice(start);
}
