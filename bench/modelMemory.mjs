/**
 * Resident memory of the built-in models in the compiled build (docs/performance.md, "Local
 * models"): plain node, no tsx, so the numbers are the service's (`make run`), not the harness's.
 *
 *   npm run build && node --expose-gc bench/modelMemory.mjs in-thread
 *   node --expose-gc bench/modelMemory.mjs workers
 *
 * Creates both models (in-thread: createLocalChatModel / createLocalEmbedder; workers: the
 * service's createWorkerChatModel / createWorkerEmbedder), answers once, runs 200 small pages
 * through facts → concepts → vectors, collects garbage, and prints RSS and the main thread's heap.
 */
const mode = process.argv[2];
if (mode !== 'in-thread' && mode !== 'workers') throw new Error('usage: node --expose-gc bench/modelMemory.mjs in-thread|workers');
const dist = new URL('../dist/src/providers/', import.meta.url);
const mib = (bytes) => (bytes / 2 ** 20).toFixed(0);
const rssBefore = process.memoryUsage().rss;
const started = performance.now();
let chat;
let embedder;
if (mode === 'workers') {
  const models = await import(new URL('modelWorkers/models.js', dist).href);
  [chat, embedder] = [models.createWorkerChatModel(), models.createWorkerEmbedder()];
} else {
  chat = (await import(new URL('llm/local.js', dist).href)).createLocalChatModel();
  embedder = (await import(new URL('embeddings/local.js', dist).href)).createLocalEmbedder();
}
await chat.extractFacts({ text: 'Marie Curie won the Nobel Prize in 1903.', chunkIndex: 0 });
await embedder.embed(['Marie Curie won the Nobel Prize in 1903.']);
const firstAnswers = performance.now() - started;
for (let page = 0; page < 200; page++) {
  const facts = await chat.extractFacts({ text: `Anna Berg built a copper telescope in Bergen in ${1700 + page}. Boris Costa mapped the river delta in Lyon.`, chunkIndex: 0 });
  await chat.extractConcepts({ facts: facts.map((fact, i) => ({ id: `${page}-${i}`, content: fact.content })), contexts: [{ name: 'Person', description: '' }] });
  await embedder.embed(facts.map((fact) => fact.content));
}
globalThis.gc?.();
const memory = process.memoryUsage();
console.log(
  `${mode}: loaded and answered in ${firstAnswers.toFixed(0)} ms; RSS ${mib(rssBefore)} → ${mib(memory.rss)} MiB ` +
    `(maxRSS ${(process.resourceUsage().maxRSS / 1024).toFixed(0)} MiB), main thread heap ${mib(memory.heapUsed)} MiB`,
);
await chat.close?.();
await embedder.close?.();
