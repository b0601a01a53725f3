import { serveWorkerCalls } from '../../util/workerPool.js';
import { extractDocument } from './extract.js';
import { serializeExtractionError, type ExtractionCall } from './extractionWorkers.js';

/** A document extraction worker thread (extractionWorkers.ts): extractDocument, off the API thread. */
serveWorkerCalls<ExtractionCall>(async (call) => {
  if (call.method !== 'extract') throw new TypeError(`unknown extraction call ${JSON.stringify(call.method)}`);
  return { value: await extractDocument(call.input) };
}, serializeExtractionError);
