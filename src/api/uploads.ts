import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { MultipartFields } from '@fastify/multipart';
import type { UploadedContent } from '../app/sources.js';
import { cleanFileName } from '../domain/text.js';
import { badRequest } from './errors.js';

/** A multipart upload (src/api/mediaTypes.ts has made sure the request is one) with its file part begun. */
export interface Upload {
  /** A text field sent before the file part; undefined when absent. */
  field(name: string): string | undefined;
  /** The file, read now: the rest of the upload must hold no second file part. */
  content(): Promise<UploadedContent>;
}

function textField(fields: MultipartFields, name: string): string | undefined {
  const part = fields[name];
  return part !== undefined && !Array.isArray(part) && part.type === 'field' && typeof part.value === 'string' ? part.value : undefined;
}

/**
 * The errors of a multipart body that does not parse, as busboy and the stream under it raise
 * them: no boundary, a body that ends before its closing boundary (cut short, or the client gone),
 * a malformed part header. They are the request's fault, a 400; fastify's own errors of the
 * upload (413 too large, the part limits) keep their status.
 */
function malformedUpload(error: unknown): Error | null {
  const { code, message, statusCode } = error as { code?: unknown; message?: unknown; statusCode?: unknown };
  if (typeof statusCode === 'number' || typeof message !== 'string') return null;
  const malformed = code === 'ERR_STREAM_PREMATURE_CLOSE' || /^(Multipart: |Unexpected end of (form|file)|Malformed part header)/.test(message);
  return malformed ? badRequest(`the multipart body is malformed: ${message}`) : null;
}

/** Runs a step of reading the upload; a body that does not parse is a 400 naming why. */
async function reading<T>(step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    throw malformedUpload(error) ?? error;
  }
}

const DISPOSITION = 'content-disposition:';
/** The longest header line read whole; busboy refuses a part's header block past 80 KiB anyway. */
const MAX_HEADER_LINE = 16_384;
/** What is kept of a line outside a part's header block: enough to see a boundary's `--`. */
const BOUNDARY_PREFIX = 2;
/** A header line: a field name (RFC 9110's token characters) and its colon. */
const HEADER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:/;

/**
 * Reads a request's bytes as they come (latin1 text) and says once it has seen a part's
 * Content-Disposition header that busboy would drop or misread for a raw line break in it: a bare
 * CR anywhere in the header, a line of it ended by a bare LF (busboy's header parser stops at
 * either, so the header is lost and the part dropped, its field name and value or its file with
 * it), or a CRLF inside a quoted value such as `name="a<CRLF>b"` (busboy ends the header there
 * and reads the name `a`). A quote still open at the line's CRLF is taken for an unclosed quote
 * when the next line is another header or ends the header block (busboy then reads the value to
 * the line's end, as sent), and as a continuation when it starts with a space or tab (an obsolete
 * folded header, which busboy joins).
 *
 * Headers are looked for only in a part's header block: from a line starting with `--` (a
 * boundary) to the first empty line. One pass over each chunk: a line is kept only up to what
 * deciding needs (two characters outside a header block, MAX_HEADER_LINE in it: a longer line is
 * passed over), and each kept line is read once when it ends, so no body, however crafted, makes
 * it read a byte twice.
 */
export function nameLineBreakScanner(): (chunk: string) => boolean {
  /** The current line as far as it is kept, and whether it went past what is kept. */
  let line = '';
  let cut = false;
  let inHeaders = false;
  /** The last header line was the Content-Disposition (or a folded line of it): a fold continues it. */
  let inDisposition = false;
  /** The Content-Disposition so far ends inside a quoted string (after a backslash in one). */
  let quoted = false;
  let escaped = false;
  /** The Content-Disposition's last line ended at its CRLF inside a quoted string: the next line decides. */
  let openAtLineEnd = false;

  /** Whether the line just ended (its LF cut off) makes the part's Content-Disposition malformed. */
  const ended = (): boolean => {
    const crlf = !cut && line.endsWith('\r');
    const text = crlf ? line.slice(0, -1) : line;
    if (!inHeaders) {
      inHeaders = text.startsWith('--');
      inDisposition = false;
      openAtLineEnd = false;
      return false;
    }
    const folded = text.startsWith(' ') || text.startsWith('\t');
    if (openAtLineEnd && !folded) {
      openAtLineEnd = false;
      if (!(crlf && text === '') && !HEADER_LINE.test(text)) return true;
    }
    if (crlf && text === '') {
      inHeaders = false;
      inDisposition = false;
      return false;
    }
    const starts = text.length >= DISPOSITION.length && text.slice(0, DISPOSITION.length).toLowerCase() === DISPOSITION;
    if (cut || !(starts || (inDisposition && folded))) {
      inDisposition = false;
      openAtLineEnd = false;
      return false;
    }
    if (!crlf || text.includes('\r')) return true;
    if (starts) {
      quoted = false;
      escaped = false;
    }
    inDisposition = true;
    for (let at = starts ? DISPOSITION.length : 0; at < text.length; at += 1) {
      const character = text[at];
      if (escaped) escaped = false;
      else if (quoted && character === '\\') escaped = true;
      else if (character === '"') quoted = !quoted;
    }
    openAtLineEnd = quoted;
    return false;
  };

  return (chunk) => {
    let from = 0;
    while (from < chunk.length) {
      const lf = chunk.indexOf('\n', from);
      const end = lf === -1 ? chunk.length : lf;
      if (!cut) {
        const room = (inHeaders ? MAX_HEADER_LINE : BOUNDARY_PREFIX) - line.length;
        if (end - from > room) {
          line += chunk.slice(from, from + room);
          cut = true;
        } else {
          line += chunk.slice(from, end);
        }
      }
      if (lf === -1) break;
      if (ended()) return true;
      line = '';
      cut = false;
      from = lf + 1;
    }
    return false;
  };
}

/**
 * busboy drops a part whose Content-Disposition holds a raw CR or LF (a header it will not trust)
 * without a word, and cuts a quoted name at a CRLF: a text field so named was lost (the upload
 * read as sent without it) or read under the name before the break ("unknown form field"), a
 * file so named read as no file part. Browsers percent-encode both (%0A), so a raw one is a
 * malformed request (docs/api.md): the bytes up to the file part are watched for one, to say so.
 * A file name's other controls reach cleanFileName, which drops them.
 */
function watchNames(raw: Readable): { readonly rawLineBreak: boolean; stop(): void } {
  const scan = nameLineBreakScanner();
  let rawLineBreak = false;
  const onData = (chunk: Buffer): void => {
    if (scan(chunk.toString('latin1'))) {
      rawLineBreak = true;
      stop();
    }
  };
  const stop = (): void => {
    raw.off('data', onData);
  };
  raw.on('data', onData);
  // A 'data' listener starts the flow: paused, the request waits for multipart's pipe, which resumes it.
  raw.pause();
  return {
    get rawLineBreak() {
      return rawLineBreak;
    },
    stop,
  };
}

/** The 400 for a part header that nameLineBreakScanner found broken. */
const RAW_LINE_BREAK =
  "a part's header is malformed: its Content-Disposition holds a raw line break (CR or LF), as a field or file name holding one does; send the name percent-encoded (%0A) or without line breaks";

/**
 * Waits for the upload's file part: its headers and the fields sent before it, not its bytes,
 * which `content` reads, so that an upload its caller may not make is never buffered. Uploads
 * hold one file (docs/api.md): a second file part is a 400, not silently dropped.
 */
export async function receiveUpload(request: FastifyRequest): Promise<Upload> {
  const names = watchNames(request.raw);
  const files = await reading(async () => request.files());
  const first = await reading(() => files.next()).finally(names.stop);
  // Whether or not a file part came: the part busboy dropped or misread may be a field before it
  // (or a part after it that came in the same chunk, as malformed).
  if (names.rawLineBreak) throw badRequest(RAW_LINE_BREAK);
  if (first.done) throw badRequest('no file part in the upload');
  const file = first.value;
  if (file.fieldname !== 'file') throw badRequest(`the file part is named '${file.fieldname}': name it 'file'`);
  // The text fields the route documents (its multipartBody, the OpenAPI document's): another, or
  // one sent twice, is a 400 rather than a value dropped without a word.
  const taken = Object.keys(request.routeOptions.config.multipartBody?.fields ?? {});
  for (const [name, part] of Object.entries(file.fields)) {
    if (part === undefined || (!Array.isArray(part) && part.type === 'file')) continue;
    if (!taken.includes(name)) throw badRequest(`unknown form field '${name}'${taken.length ? `: this upload takes ${taken.join(', ')}` : ': this upload takes the file only'}`);
    if (Array.isArray(part)) throw badRequest(`form field '${name}' sent more than once`);
  }
  return {
    field: (name) => textField(file.fields, name),
    content: async () => {
      const body = await reading(() => file.toBuffer());
      try {
        // multipart's `files: 1` limit raises FST_FILES_LIMIT when a second file part begins.
        if (!(await files.next()).done) throw badRequest('send one file part');
      } catch (error) {
        if ((error as { code?: unknown }).code === 'FST_FILES_LIMIT') throw badRequest('send one file part');
        throw malformedUpload(error) ?? error;
      }
      return { filename: cleanFileName(file.filename), declaredType: file.mimetype ?? null, body };
    },
  };
}
