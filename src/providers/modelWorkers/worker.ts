import { embedTexts, LOCAL_EMBEDDER_DIMENSIONS, loadWordTable } from '../embeddings/local.js';
import { WordTable } from '../embeddings/wordTable.js';
import { createLocalChatModel, preloadLocalChatModel } from '../llm/local.js';
import { serveWorkerCalls } from '../../util/workerPool.js';
import { serializeError, type ModelCall } from './protocol.js';

/**
 * A model worker thread: runs the built-in models (llm/local.ts, embeddings/local.ts) for the
 * pool (pool.ts). Requests are handled one at a time, in order; the word table arrives as shared
 * buffers, so every worker reads the one copy its loader made.
 */

const chat = createLocalChatModel();
let table: WordTable | null = null;

async function run(call: ModelCall): Promise<{ value: unknown; transfer?: ArrayBuffer[] }> {
  switch (call.method) {
    case 'preloadChat':
      preloadLocalChatModel();
      return { value: null };
    case 'loadWordTable':
      table = loadWordTable(call.cacheDir);
      return { value: table.buffers };
    case 'useWordTable':
      table = new WordTable(call.table);
      return { value: null };
    case 'extractFacts':
      return { value: await chat.extractFacts(call.input) };
    case 'extractImageFacts':
      return { value: await chat.extractImageFacts(call.input) };
    case 'extractConcepts':
      return { value: await chat.extractConcepts(call.input) };
    case 'refineConcepts':
      return { value: await chat.refineConcepts(call.input) };
    case 'embed': {
      if (table === null) throw new Error('the word table was not given to this model worker');
      const vectors = embedTexts(table, call.texts);
      const flat = new Float64Array(vectors.length * LOCAL_EMBEDDER_DIMENSIONS);
      vectors.forEach((vector, i) => flat.set(vector, i * LOCAL_EMBEDDER_DIMENSIONS));
      return { value: flat, transfer: [flat.buffer] };
    }
    default:
      throw new TypeError(`unknown model call ${JSON.stringify((call as { method?: unknown }).method)}`);
  }
}

serveWorkerCalls(run, serializeError);
