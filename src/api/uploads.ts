import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { MultipartFields, MultipartFile } from '@fastify/multipart';
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

/** A part's header parameters as busboy splits and decodes them: the disposition type, then `[name, value]` pairs. */
type Params = Array<string | [string, string | undefined]>;

/**
 * busboy's own parameter parser, from the copy @fastify/multipart reads uploads with: the check
 * below reads a part's Content-Disposition and the request's boundary exactly as busboy does,
 * `name*=` and `filename*=` (RFC 5987, 2231) decoded in their charset included. Not a public
 * export of busboy: a version that moves it fails here, at start-up, not in silence.
 */
const parseParams = createRequire(createRequire(import.meta.url).resolve('@fastify/multipart'))('@fastify/busboy/lib/utils/parseParams') as (value: string) => Params;

/** busboy's limits on a part's header block (its defaults: src/api/app.ts sets neither); past them it reads the block cut short. */
const MAX_HEADER_CHARS = 80 * 1024;
const MAX_HEADER_LINES = 2_000;
/** A header line: a field name (RFC 9110's token characters) and its colon. */
const HEADER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:/;

/** Why a part's header is malformed: the reasons its 400 gives after "a part's header is malformed: ". */
export const MALFORMED = {
  lineBreak: 'a header line holds a raw line break (a CR or LF that is not the CRLF ending the line), as a field or file name holding one does; send the name percent-encoded (%0A) or without line breaks',
  notHeader: "a line of it is not a header ('Name: value'), as the rest of a field or file name cut by a raw CRLF is",
  boundaryLine: 'its boundary line holds more than the boundary',
  noDisposition: "it has no 'Content-Disposition: form-data'",
  decodedLineBreak: 'a field or file name holds a line break (CR or LF) once decoded (name*= or filename*= percent-encoding %0A or %0D); send the name without line breaks',
  unended: 'the next boundary comes before the empty line that ends it',
  tooLong: `it is longer than ${MAX_HEADER_CHARS / 1024} KiB`,
  tooManyLines: `it has more than ${MAX_HEADER_LINES.toLocaleString('en')} lines`,
} as const;

/**
 * Whether busboy reads a part's header block (the text after the part's `--boundary`, up to the
 * empty line ending it, that excluded) whole and keeps the part: why not, or null. busboy's header
 * parser stops at the first line holding a bare CR or LF or no colon, and keeps the headers before
 * it only; a part without a `Content-Disposition: form-data` it then drops, as it drops one whose
 * name or file name, decoded, holds a CR or LF. A header line must also be `token: value` here
 * (busboy would take `ti": x`, the rest of a name cut by a CRLF, for a header).
 */
function headerBlockFault(block: string): string | null {
  if (block.length > MAX_HEADER_CHARS) return MALFORMED.tooLong;
  const lines = block.split('\r\n');
  // The rest of the boundary line: busboy reads it as the block's first header line.
  if (lines[0] !== '') return lines[0].includes('\r') || lines[0].includes('\n') ? MALFORMED.lineBreak : MALFORMED.boundaryLine;
  let disposition: string | undefined;
  let inDisposition = false;
  let headers = 0;
  for (let at = 1; at < lines.length; at += 1) {
    const line = lines[at];
    if (line.includes('\r') || line.includes('\n')) return MALFORMED.lineBreak;
    if (headers === MAX_HEADER_LINES) return MALFORMED.tooManyLines;
    if (headers > 0 && (line.startsWith(' ') || line.startsWith('\t'))) {
      // A folded line, which busboy joins to the header above, its leading space kept.
      if (inDisposition) disposition += line;
      continue;
    }
    const name = HEADER_LINE.exec(line)?.[0];
    if (name === undefined) return MALFORMED.notHeader;
    headers += 1;
    inDisposition = disposition === undefined && name.toLowerCase() === 'content-disposition:';
    if (inDisposition) disposition = line.slice(name.length + (line[name.length] === ' ' || line[name.length] === '\t' ? 1 : 0));
  }
  // What busboy then does with the first Content-Disposition (@fastify/busboy's lib/types/multipart.js).
  if (disposition === undefined) return MALFORMED.noDisposition;
  const params = parseParams(disposition);
  if (!/^form-data$/i.test(String(params[0]))) return MALFORMED.noDisposition;
  for (const param of params) {
    if (Array.isArray(param) && /^(file)?name$/i.test(param[0]) && /[\r\n]/.test(param[1] ?? '')) return MALFORMED.decodedLineBreak;
  }
  return null;
}

/** The boundary of a multipart request's Content-Type as busboy reads it; undefined without one (busboy refuses the body). */
export function multipartBoundary(contentType: string | undefined): string | undefined {
  for (const param of contentType === undefined ? [] : parseParams(contentType)) {
    if (Array.isArray(param) && /^boundary$/i.test(param[0]) && typeof param[1] === 'string') return param[1];
  }
  return undefined;
}

/**
 * Reads a multipart body's bytes as they come (latin1 text) and says, once it has read it, why a
 * part's header is one busboy would drop the part for or misread (headerBlockFault), or null. It
 * finds the parts as busboy's Dicer does: each `CRLF--boundary` delimiter (a CRLF taken as read
 * before the body, so that the body may open with `--boundary`) ends a part and, unless `--`
 * follows it, begins the next, whose header block runs to the first CRLFCRLF; text before the
 * first delimiter and after the closing one is not read. A header block the next delimiter cuts
 * (its CRLFCRLF not whole before the delimiter) busboy drops the part of, header and all.
 *
 * One pass over each character, in any chunking: the delimiter is matched by a Knuth-Morris-Pratt
 * automaton (in a part's body, while no delimiter is under way, indexOf skips to the next CR, where
 * one may begin), and a header block is kept only up to busboy's limit on it, then judged once.
 */
export function partHeaderScanner(boundary: string): (chunk: string) => string | null {
  const delimiter = `\r\n--${boundary}`;
  // fallback[k]: the longest proper prefix of delimiter[0, k] that is also its suffix.
  const fallback = new Array<number>(delimiter.length).fill(0);
  for (let at = 1, length = 0; at < delimiter.length; at += 1) {
    while (length > 0 && delimiter[at] !== delimiter[length]) length = fallback[length - 1];
    if (delimiter[at] === delimiter[length]) length += 1;
    fallback[at] = length;
  }
  /** How much of the delimiter the text read ends with: the CRLF busboy reads before the body. */
  let matched = 2;
  /** Before the first delimiter; after one (its `--` or not); in a part's header block; in a part's body; after the closing delimiter. */
  let phase: 'preamble' | 'dashes' | 'header' | 'body' | 'done' = 'preamble';
  let dashes = 0;
  /** The header block read so far (chunks before this one), and how much of a CRLFCRLF it ends with. */
  let block = '';
  let ending = 0;
  /** Where the current part's header block and its CRLFCRLF end, counted from the body's start. */
  let headerEnd = -1;
  /** Characters read before the current chunk. */
  let offset = 0;
  let fault: string | null = null;

  return (chunk) => {
    if (fault !== null || phase === 'done') return fault;
    /** Where this chunk's share of the header block begins. */
    let from = 0;
    for (let at = 0; at < chunk.length; at += 1) {
      if (matched === 0 && (phase === 'body' || phase === 'preamble')) {
        // No delimiter under way: the next can only begin at a CR.
        at = chunk.indexOf('\r', at);
        if (at === -1) break;
      }
      const character = chunk[at];
      if (phase === 'dashes') {
        if (character === '-' && dashes === 0) {
          dashes = 1;
        } else if (character === '-') {
          phase = 'done';
          return null;
        } else {
          // busboy reads a lone dash after the boundary as the header block's first character.
          phase = 'header';
          block = dashes === 1 ? '-' : '';
          ending = 0;
          from = at;
        }
      }
      if (phase === 'header') {
        if (character === '\r') ending = ending === 2 ? 3 : 1;
        else if (character === '\n' && (ending === 1 || ending === 3)) ending += 1;
        else ending = 0;
        const length = block.length + at + 1 - from;
        if (ending === 4) {
          headerEnd = offset + at + 1;
          const whole = block + chunk.slice(from, at + 1);
          fault = headerBlockFault(whole.slice(0, -4));
          if (fault !== null) return fault;
          phase = 'body';
          block = '';
        } else if (length - ending > MAX_HEADER_CHARS) {
          fault = MALFORMED.tooLong;
          return fault;
        }
      }
      while (matched > 0 && character !== delimiter[matched]) matched = fallback[matched - 1];
      if (character === delimiter[matched]) matched += 1;
      if (matched === delimiter.length) {
        matched = 0;
        const start = offset + at + 1 - delimiter.length;
        if (phase === 'header' || (phase === 'body' && headerEnd > start)) {
          fault = MALFORMED.unended;
          return fault;
        }
        phase = 'dashes';
        dashes = 0;
      }
    }
    if (phase === 'header') block += chunk.slice(from);
    offset += chunk.length;
    return null;
  };
}

/**
 * Watches a multipart request's bytes as busboy reads them, for a part header it would drop the
 * part for or misread without a word (partHeaderScanner): a text field so sent was lost (the
 * upload went on without it) or read under another name, a file read as "no file part in the
 * upload", a part after the file part dropped unseen. Its `data` listener comes before
 * @fastify/multipart's pipe, so whatever busboy has read the watch has read too. It reads to the
 * end of the body, every part of it, until stopped.
 */
function watchPartHeaders(raw: Readable, contentType: string | undefined): { readonly fault: string | null; stop(): void } {
  const boundary = multipartBoundary(contentType);
  let fault: string | null = null;
  if (boundary === undefined) return { fault, stop: () => {} };
  const scan = partHeaderScanner(boundary);
  const onData = (chunk: Buffer): void => {
    fault = scan(chunk.toString('latin1'));
    if (fault !== null) stop();
  };
  const stop = (): void => {
    raw.off('data', onData);
  };
  raw.on('data', onData);
  // A 'data' listener starts the flow: paused, the request waits for multipart's pipe, which resumes it.
  raw.pause();
  return {
    get fault() {
      return fault;
    },
    stop,
  };
}

/**
 * The upload's file parts, as `request.files()` yields them, keeping the text fields read so far
 * in `seen`: `request.files()` shows them only on a file part, so an upload with none could not
 * say which fields it held.
 */
async function* fileParts(request: FastifyRequest, seen: { fields: MultipartFields }): AsyncGenerator<MultipartFile> {
  for await (const part of request.parts()) {
    seen.fields = part.fields;
    if (part.type === 'file') yield part;
  }
}

/**
 * The 400 for an upload without a file part. A text field named `file` is the file sent as text
 * (`curl -F file=text`, or `-F file=<path`, which sends the file's content as text): say so
 * rather than only that no file came.
 */
function noFilePart(fields: MultipartFields): Error {
  if (fields.file === undefined) return badRequest('no file part in the upload');
  // Every file part is yielded as it begins, so a `file` seen here is text only.
  return badRequest("no file part in the upload: the form field 'file' was sent as text (its part has no filename); send the file as a file part, as curl -F file=@path does");
}

/** The 400 for a part's header that busboy would drop the part for or misread. */
const malformedHeader = (fault: string) => badRequest(`a part's header is malformed: ${fault}`);

/**
 * Refuses the text fields of an upload its route does not take, one sent twice, and (once the
 * whole body is read) one after the file part, rather than drop or take a value without a word:
 * the route reads its fields as the file part begins, so a field after it was taken from a small
 * body, which busboy had read whole by then, and dropped from a larger one.
 * `file.fields` holds the parts in the order busboy read them, the file part among them.
 */
function checkFields(file: MultipartFile, taken: readonly string[], { whole = false } = {}): void {
  const names = Object.keys(file.fields);
  const filePosition = names.indexOf(file.fieldname);
  for (const [position, name] of names.entries()) {
    const part = file.fields[name];
    if (part === undefined || (!Array.isArray(part) && part.type === 'file')) continue;
    // The file part's name with a text part beside it: not an unknown field, the file sent twice.
    if (name === file.fieldname) throw badRequest(`the form field '${name}' was sent as text as well as the file part; send the file part only`);
    if (!taken.includes(name)) throw badRequest(`unknown form field '${name}'${taken.length ? `: this upload takes ${taken.join(', ')}` : ': this upload takes the file only'}`);
    if (Array.isArray(part)) throw badRequest(`form field '${name}' sent more than once`);
    if (whole && position > filePosition) throw badRequest(`form field '${name}' comes after the file part: send the form fields before the file`);
  }
}

/**
 * Waits for the upload's file part: its headers and the fields sent before it, not its bytes,
 * which `content` reads, so that an upload its caller may not make is never buffered. Uploads
 * hold one file (docs/api.md): a second file part is a 400, not silently dropped. Every part's
 * header is checked (watchPartHeaders), those before the file part before it is taken, those
 * after it before `content` returns, so that a refused upload stores nothing.
 */
export async function receiveUpload(request: FastifyRequest): Promise<Upload> {
  const headers = watchPartHeaders(request.raw, request.headers['content-type']);
  /** Runs a step of reading the upload; a malformed part header read by then is the 400, whatever the step made of the body. */
  const step = async <T>(run: () => Promise<T>): Promise<T> => {
    let result: T;
    try {
      result = await run();
    } catch (error) {
      if (headers.fault !== null) throw malformedHeader(headers.fault);
      throw error;
    }
    if (headers.fault !== null) throw malformedHeader(headers.fault);
    return result;
  };
  // The text fields the route documents (its multipartBody, the OpenAPI document's).
  const taken = Object.keys(request.routeOptions.config.multipartBody?.fields ?? {});
  let file: MultipartFile;
  const seen: { fields: MultipartFields } = { fields: {} };
  const files = fileParts(request, seen);
  try {
    const first = await step(() => reading(() => files.next()));
    if (first.done) throw noFilePart(seen.fields);
    file = first.value;
    if (file.fieldname !== 'file') throw badRequest(`the file part is named '${file.fieldname}': name it 'file'`);
    checkFields(file, taken);
  } catch (error) {
    headers.stop();
    throw error;
  }
  return {
    field: (name) => textField(file.fields, name),
    content: async () => {
      try {
        const body = await step(() => reading(() => file.toBuffer()));
        // The rest of the body, every part of which is read (and its header checked) before the upload is taken.
        const rest = await step(async () => {
          try {
            return await files.next();
          } catch (error) {
            // multipart's `files: 1` limit raises FST_FILES_LIMIT when a second file part begins.
            if ((error as { code?: unknown }).code === 'FST_FILES_LIMIT') throw badRequest('send one file part');
            throw malformedUpload(error) ?? error;
          }
        });
        if (!rest.done) throw badRequest('send one file part');
        // Fields the body held after the file part, read now; which of them busboy had read when
        // the file part began depended on how the body came in packets.
        checkFields(file, taken, { whole: true });
        const uploaded: UploadedContent = { filename: cleanFileName(file.filename), declaredType: file.mimetype ?? null, body };
        // An upload sent with an Idempotency-Key: what it asks is known now (src/api/idempotency.ts).
        // It names the file by its bytes' SHA-256, which goes on with them, for the asset store not to hash them again.
        if (request.idempotentUpload === undefined) return uploaded;
        const sha256 = createHash('sha256').update(body).digest('hex');
        const { filename, declaredType } = uploaded;
        await request.idempotentUpload({ filename, declaredType, sha256, fields: Object.fromEntries(taken.map((name) => [name, textField(file.fields, name) ?? null])) });
        return { ...uploaded, sha256 };
      } finally {
        headers.stop();
      }
    },
  };
}
