/**
 * What the first bytes of a body say about it, for extraction (./extract.ts) and for uploads,
 * which are checked on the API thread before they are stored (a module without the parsers).
 */

/** How much of a body is looked at to tell its kind. */
export const SNIFF_BYTES = 4096;

// Control characters other than tab, newlines, form feed and escape: text of any 8-bit or UTF-8
// encoding has none, binary data nearly always some within its first kilobytes.
export const BINARY_CONTROLS = /[\u0000-\u0008\u000e-\u001a\u001c-\u001f\u007f]/;

/** The byte order a UTF-16 byte order mark gives, or null without one. */
export function utf16Label(body: Uint8Array): 'utf-16le' | 'utf-16be' | null {
  if (body[0] === 0xff && body[1] === 0xfe) return 'utf-16le';
  if (body[0] === 0xfe && body[1] === 0xff) return 'utf-16be';
  return null;
}

/**
 * Whether bytes declared as text (HTML, Markdown, plain text) are binary data instead: control
 * bytes in the first kilobytes, whatever the 8-bit encoding (UTF-16 with a BOM aside). Read as
 * text they would become facts of replacement characters.
 */
export function looksBinary(body: Uint8Array): boolean {
  if (utf16Label(body)) return false;
  return BINARY_CONTROLS.test(Buffer.from(body.buffer, body.byteOffset, Math.min(body.byteLength, SNIFF_BYTES)).toString('latin1'));
}

/** Whether a body is a PDF: its header, which the PDF reference lets appear anywhere in the first 1024 bytes. */
export function startsWithPdfMagic(body: Uint8Array): boolean {
  return Buffer.from(body.buffer, body.byteOffset, Math.min(body.byteLength, 1024)).includes('%PDF-', 0, 'latin1');
}

export interface ParsedContentType {
  mime: string | null;
  charset: string | null;
}

/** A Content-Type header (or an upload's declared type): its media type in lower case and its charset parameter. */
export function parseContentType(contentType: string | null | undefined): ParsedContentType {
  if (!contentType) return { mime: null, charset: null };
  const [mimePart = '', ...parameters] = contentType.split(';');
  const mime = mimePart.trim().toLowerCase() || null;
  let charset: string | null = null;
  for (const parameter of parameters) {
    const [name, value] = parameter.split('=', 2);
    if (name?.trim().toLowerCase() === 'charset' && value) charset = value.trim().replace(/^["']|["']$/g, '') || null;
  }
  return { mime, charset };
}
