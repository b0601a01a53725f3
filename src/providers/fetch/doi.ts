/** The text is not a DOI in any accepted form. Permanent: the same input never resolves. */
export class InvalidDoiError extends Error {
  override readonly name = 'InvalidDoiError';
  readonly permanent = true;
}

// Directory indicator 10, a registrant code of 4 to 9 digits (optionally with dotted
// sub-codes, e.g. 10.1000.10), a slash and a suffix of printable characters.
const DOI_SYNTAX = /^10\.\d{4,9}(?:\.\d+)*\/[^\s\p{Cc}]+$/u;
const DOI_SCHEME_PREFIX = /^doi:\s*/i;
const DOI_RESOLVER_PREFIX = /^https?:\/\/(?:dx\.)?doi\.org\//i;

/**
 * Returns the bare DOI (`10.1000/xyz123`) from `10.1000/xyz123`, `doi:10.1000/xyz123` or a
 * doi.org URL (percent-escapes decoded). DOIs compare case-insensitively; the case is kept.
 * Throws InvalidDoiError for anything else.
 */
export function normalizeDoi(doi: string): string {
  const input = typeof doi === 'string' ? doi.trim() : '';
  let bare = input;
  if (DOI_SCHEME_PREFIX.test(bare)) {
    bare = bare.replace(DOI_SCHEME_PREFIX, '');
  } else if (DOI_RESOLVER_PREFIX.test(bare)) {
    bare = bare.replace(DOI_RESOLVER_PREFIX, '');
    try {
      bare = decodeURIComponent(bare);
    } catch {
      throw new InvalidDoiError(`invalid DOI ${JSON.stringify(input)}: malformed percent-escape in the URL`);
    }
  }
  if (!DOI_SYNTAX.test(bare)) {
    throw new InvalidDoiError(
      `invalid DOI ${JSON.stringify(input)}: expected 10.<registrant>/<suffix> such as 10.1000/xyz123, ` +
        'optionally as doi:10.1000/xyz123 or https://doi.org/10.1000/xyz123',
    );
  }
  return bare;
}

/** Escapes what a URL path cannot carry; keeps the characters DOIs commonly use readable. */
function encodeDoiPath(doi: string): string {
  return encodeURIComponent(doi).replace(/%(2F|3A|3B|40|2C|3D|24|26)/gi, (escape) => decodeURIComponent(escape));
}

/** The resolver URL of a DOI, e.g. `https://doi.org/10.1000/xyz123`. */
export function doiToUrl(doi: string, resolverBase = 'https://doi.org/'): string {
  const bare = normalizeDoi(doi);
  let base: string;
  try {
    base = new URL(resolverBase.endsWith('/') ? resolverBase : `${resolverBase}/`).href;
  } catch (error) {
    throw new TypeError(`invalid DOI resolver base ${JSON.stringify(resolverBase)}: expected an absolute URL`, { cause: error });
  }
  // Appended, not resolved with new URL(): a suffix such as `../x` must not be normalised away.
  return base + encodeDoiPath(bare);
}
