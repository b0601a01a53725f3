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

/**
 * Waits for the upload's file part: its headers and the fields sent before it, not its bytes,
 * which `content` reads, so that an upload its caller may not make is never buffered. Uploads
 * hold one file (docs/api.md): a second file part is a 400, not silently dropped.
 */
export async function receiveUpload(request: FastifyRequest): Promise<Upload> {
  const files = await reading(async () => request.files());
  const first = await reading(() => files.next());
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
