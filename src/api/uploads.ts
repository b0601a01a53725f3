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
/** The longest header line looked at; busboy refuses a part's header block past 80 KiB anyway. */
const MAX_DISPOSITION_LINE = 16_384;

/** Whether one Content-Disposition line (its LF cut off) quotes a file name holding a bare CR, or one the line's bare LF ended. */
function fileNameBroken(line: string): boolean {
  const endedByBareLf = !line.endsWith('\r');
  const header = endedByBareLf ? line : line.slice(0, -1);
  const lower = header.toLowerCase();
  let at = lower.indexOf('filename', DISPOSITION.length);
  while (at !== -1) {
    let next = at + 'filename'.length;
    if (header[next] === '*') next += 1;
    while (header[next] === ' ' || header[next] === '\t') next += 1;
    if (header[next] === '=') {
      next += 1;
      while (header[next] === ' ' || header[next] === '\t') next += 1;
      if (header[next] === '"') {
        const close = header.indexOf('"', next + 1);
        if (header.slice(next + 1, close === -1 ? header.length : close).includes('\r')) return true;
        if (close === -1) return endedByBareLf;
        next = close + 1;
      }
    }
    at = lower.indexOf('filename', next);
  }
  return false;
}

/**
 * Reads a request's bytes as they come (latin1 text) and says once it has seen a Content-Disposition
 * header whose quoted file name holds a bare CR or LF. One pass over each chunk: a line is kept only
 * while it may be that header (it starts with the header's name) and up to MAX_DISPOSITION_LINE
 * characters, so no body, however crafted, makes it read a byte twice.
 */
export function fileNameLineBreakScanner(): (chunk: string) => boolean {
  let line = '';
  /** The current line cannot be the header: its bytes are passed over until its end. */
  let passing = false;
  return (chunk) => {
    let from = 0;
    while (from < chunk.length) {
      const lf = chunk.indexOf('\n', from);
      const end = lf === -1 ? chunk.length : lf;
      if (!passing) {
        line += chunk.slice(from, end);
        const start = line.slice(0, DISPOSITION.length).toLowerCase();
        passing = !DISPOSITION.startsWith(start) || line.length > MAX_DISPOSITION_LINE;
        if (passing) line = '';
        else if (lf !== -1 && line.length >= DISPOSITION.length && fileNameBroken(line)) return true;
      }
      if (lf === -1) break;
      line = '';
      passing = false;
      from = lf + 1;
    }
    return false;
  };
}

/**
 * busboy drops a part whose file name holds a bare CR or LF (a header it will not trust) without
 * a word, so the upload read as having no file part. Browsers percent-encode both (%0A), so a raw
 * one is a malformed request (docs/api.md): the bytes before the file part are watched for one,
 * to say so. A file name's other controls reach cleanFileName, which drops them.
 */
function watchFileNames(raw: Readable): { readonly rawLineBreak: boolean; stop(): void } {
  const scan = fileNameLineBreakScanner();
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

/**
 * Waits for the upload's file part: its headers and the fields sent before it, not its bytes,
 * which `content` reads, so that an upload its caller may not make is never buffered. Uploads
 * hold one file (docs/api.md): a second file part is a 400, not silently dropped.
 */
export async function receiveUpload(request: FastifyRequest): Promise<Upload> {
  const names = watchFileNames(request.raw);
  const files = await reading(async () => request.files());
  const first = await reading(() => files.next()).finally(names.stop);
  if (first.done) {
    throw badRequest(names.rawLineBreak ? 'the file name is malformed: it holds a raw line break (CR or LF); send it percent-encoded (%0A) or without' : 'no file part in the upload');
  }
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
