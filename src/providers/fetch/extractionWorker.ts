import { serveWorkerCalls } from '../../util/workerPool.js';
import { extractDocument } from './extract.js';
import { serializeExtractionError, type ExtractionCall } from './extractionWorkers.js';
import { extractPdfImages } from './pdfImages.js';

/** A document extraction worker thread (extractionWorkers.ts): extractDocument and extractPdfImages, off the API thread. */
serveWorkerCalls<ExtractionCall>(async (call) => {
  switch (call.method) {
    case 'extract':
      return { value: await extractDocument(call.input) };
    case 'pdfImages':
      return { value: await extractPdfImages(call.body, call.limits) };
    default:
      throw new TypeError(`unknown extraction call ${JSON.stringify((call as { method?: unknown }).method)}`);
  }
}, serializeExtractionError);
