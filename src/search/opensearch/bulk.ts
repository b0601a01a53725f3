import type { Client } from '@opensearch-project/opensearch';
import { listFields, memberSpellings, TOMBSTONE, type DocumentUpdate, type IndexedDocument, type SearchCollection } from '../collection.js';
import type { SearchLogger } from '../port.js';
import { SearchIndexWriteError, sleep } from './client.js';
import { chunkedBySize } from '../../util/chunked.js';

/**
 * Bulk writes: the painless scripts that make every write idempotent, the bulk actions built from
 * documents, updates and removals, and sending them with retries on back-pressure.
 */

/** One bulk action (its request lines) and the document it is about, for retries and error reports. */
export interface BulkAction {
  id: string;
  lines: Record<string, unknown>[];
  /** A partial update of a document that is not there is no error (the document was removed). */
  missingIsFine?: boolean;
}

/** Where a write goes: the alias (checked with require_alias) or an index being rebuilt. */
export interface WriteTarget {
  index: string;
  viaAlias: boolean;
}

/** The scripts of one collection, composed from what it declares. */
export interface CollectionScripts {
  upsert: string;
  update: string;
  tombstone: string;
}

/**
 * Upsert: sets the fields, never moves a field back to its `initial` value, keeps the earliest
 * of a `keepEarliest` date, touches the vector only when one is given, ignores a write older
 * than the stored stream version, never writes over a tombstone, and reports 'noop' when nothing
 * changes, so re-applying an event rewrites nothing. Update: the same guards, then fields set,
 * list members added and removed as mergeAliases compares them (each update names, with every
 * member, the lower-cased spellings a stored member of its key may have: memberSpellings, as
 * painless cannot compose), and the vector.
 * Tombstone: every field but the id, repository and hidden field removed, the hidden field set
 * to `removed`.
 */
export function scriptsOf(collection: SearchCollection): CollectionScripts {
  const fields = Object.entries(collection.fields);
  const hidden = collection.hidden?.field;
  const head = [
    'def s = ctx._source;',
    ...(collection.tombstones && hidden ? [`if (s.${hidden} == '${TOMBSTONE}') { ctx.op = 'none'; return; }`] : []),
    ...(collection.versioned ? ["if (params.version != null && s.version != null && params.version <= s.version) { ctx.op = 'none'; return; }"] : []),
    'boolean changed = false;',
    ...(collection.versioned ? ['if (params.version != null && s.version != params.version) { s.version = params.version; changed = true; }'] : []),
  ];
  const vector = collection.vectors
    ? [
        "if (params.vector_mode == 'set') {",
        '  if (s.embedding != params.vector) { s.embedding = params.vector; changed = true; }',
        "} else if (params.vector_mode == 'remove') {",
        "  if (s.containsKey('embedding')) { s.remove('embedding'); changed = true; }",
        '}',
      ]
    : [];
  const tail = ["if (!changed) { ctx.op = 'none'; }"];
  const keepInitial = fields.flatMap(([name, spec]) =>
    spec.type === 'keyword' && spec.initial !== undefined
      ? [`  if (entry.getKey() == '${name}' && entry.getValue() == '${spec.initial}' && s.${name} != null && s.${name} != '${spec.initial}') { continue; }`]
      : [],
  );
  const earliest = fields.flatMap(([name, spec]) =>
    spec.type === 'date' && spec.keepEarliest
      ? [`if (s.${name} == null || params.${name}.compareTo(s.${name}) < 0) { s.${name} = params.${name}; changed = true; }`]
      : [],
  );
  const setFields = (source: string, guards: string[]) => [
    `for (entry in params.${source}.entrySet()) {`,
    ...guards,
    '  if (s.get(entry.getKey()) != entry.getValue()) { s.put(entry.getKey(), entry.getValue()); changed = true; }',
    '}',
  ];
  const lists = listFields(collection).flatMap((name) => [
    `def ${name}List = s.${name} == null ? new ArrayList() : new ArrayList(s.${name});`,
    `def ${name}Gone = params.remove['${name}'];`,
    `for (int i = ${name}List.size() - 1; i >= 0; i--) {`,
    `  if (${name}Gone.contains(${name}List.get(i).toLowerCase())) { ${name}List.remove(i); changed = true; }`,
    '}',
    `for (a in params.add['${name}']) {`,
    '  boolean found = false;',
    `  for (x in ${name}List) { if (a['spellings'].contains(x.toLowerCase())) { found = true; break; } }`,
    `  if (!found) { ${name}List.add(a['member']); changed = true; }`,
    '}',
    `s.${name} = ${name}List;`,
  ]);
  const cleared = [...fields.map(([name]) => name).filter((name) => name !== hidden), ...(collection.versioned ? ['version'] : []), ...(collection.vectors ? ['embedding'] : [])];
  const tombstone = [
    'def s = ctx._source;',
    `if (s.${hidden} == '${TOMBSTONE}' && !s.containsKey('${collection.opensearch.completeField}')) { ctx.op = 'none'; return; }`,
    `for (field in [${cleared.map((name) => `'${name}'`).join(', ')}]) { s.remove(field); }`,
    `s.${hidden} = '${TOMBSTONE}';`,
  ];
  return {
    upsert: [...head, ...setFields('fields', keepInitial), ...earliest, ...vector, ...tail].join('\n'),
    update: [...head, ...setFields('set', []), ...lists, ...vector, ...tail].join('\n'),
    tombstone: tombstone.join('\n'),
  };
}

const vectorMode = (vector: number[] | null | undefined) => (vector === undefined ? 'keep' : vector === null ? 'remove' : 'set');
const withVector = (vector: number[] | null | undefined) => (Array.isArray(vector) ? { embedding: vector } : {});

/** Upserts of checked documents: the script sets what changed; `upsert` is the document when it is new. */
export function upsertActions(collection: SearchCollection, scripts: CollectionScripts, docs: readonly IndexedDocument[]): BulkAction[] {
  const earliest = Object.entries(collection.fields)
    .filter(([, spec]) => spec.type === 'date' && spec.keepEarliest)
    .map(([name]) => name);
  return docs.map((doc) => {
    const values: Record<string, unknown> = { ...doc };
    const fields: Record<string, unknown> = { id: doc.id, repository_id: doc.repository_id };
    for (const name of Object.keys(collection.fields)) if (!earliest.includes(name)) fields[name] = values[name];
    const kept = Object.fromEntries(earliest.map((name) => [name, values[name]]));
    const version = collection.versioned && doc.version !== undefined ? { version: doc.version } : {};
    return {
      id: doc.id,
      lines: [
        { update: { _id: doc.id, retry_on_conflict: 3 } },
        {
          script: {
            lang: 'painless',
            source: scripts.upsert,
            params: { fields, ...kept, version: doc.version ?? null, vector_mode: vectorMode(doc.vector), vector: doc.vector ?? null },
          },
          upsert: { ...fields, ...kept, ...version, ...withVector(doc.vector) },
        },
      ],
    };
  });
}

/**
 * Partial updates. With tombstones, a document not indexed yet (its status overtook its text on
 * another Kafka topic) gets a partial document that the later upsert completes, and searches
 * skip it meanwhile. Without, an update of a missing document (removed by a merge) is ignored,
 * so a late change does not bring it back.
 */
export function updateActions(collection: SearchCollection, scripts: CollectionScripts, updates: readonly DocumentUpdate<IndexedDocument>[]): BulkAction[] {
  const lists = listFields(collection);
  return updates.map((update) => {
    const set: Record<string, unknown> = update.set ?? {};
    // Members were checked as strings and spelt by mergeAliases (normaliseUpdates): blanks are gone.
    const membersOf = (given: Partial<Record<string, string[]>> | undefined, name: string): string[] => given?.[name] ?? [];
    const added = Object.fromEntries(lists.map((name) => [name, membersOf(update.addTo, name).map((member) => ({ member, spellings: memberSpellings(member) }))]));
    const removed = Object.fromEntries(lists.map((name) => [name, [...new Set(membersOf(update.removeFrom, name).flatMap(memberSpellings))]]));
    const script = {
      lang: 'painless',
      source: scripts.update,
      params: {
        set,
        add: added,
        remove: removed,
        version: update.version ?? null,
        vector_mode: vectorMode(update.vector),
        vector: update.vector ?? null,
      },
    };
    const header = { update: { _id: update.id, retry_on_conflict: 3 } };
    if (!collection.tombstones) return { id: update.id, missingIsFine: true, lines: [header, { script }] };
    return { id: update.id, lines: [header, { script, upsert: { id: update.id, repository_id: update.repository_id, ...set, ...withVector(update.vector) } }] };
  });
}

/**
 * Removals. With tombstones, a removed document stays as a tombstone (id, repository, hidden field
 * `removed`) that the upsert and update scripts never write over: on Kafka a fact's merge (its
 * own stream) can overtake its extraction or embedding (its source's stream, another partition),
 * and a plain delete would let the late write bring the merged fact back. Without, a delete.
 */
export function removalActions(collection: SearchCollection, scripts: CollectionScripts, repositoryId: string, ids: readonly string[]): BulkAction[] {
  const hidden = collection.hidden?.field;
  return [...new Set(ids)].map((id) =>
    collection.tombstones && hidden
      ? {
          id,
          lines: [
            { update: { _id: id, retry_on_conflict: 3 } },
            { script: { lang: 'painless', source: scripts.tombstone }, upsert: { id, repository_id: repositoryId, [hidden]: TOMBSTONE } },
          ],
        }
      : { id, missingIsFine: true, lines: [{ delete: { _id: id } }] },
  );
}

type BulkItems = { errors: boolean; items: Record<string, { status: number; error?: { type?: string; reason?: string } }>[] };

/**
 * The most bytes of actions one bulk request carries. OpenSearch answers 413 to a request past
 * `http.max_content_length` (100 MB by default, 10 MiB on some managed offerings), and a document
 * carries its vector twice (the script's parameter and the upsert): 500 documents of 8,000
 * dimensions made 168 MB, so large embedding models failed on a source's facts. 8 MiB is below
 * both limits and in the 5-15 MB OpenSearch suggests for a bulk request.
 */
export const BULK_MAX_BYTES = 8 * 1024 * 1024;

/**
 * `actions` in consecutive batches of at most `maxActions` and, by their JSON, `maxBytes` (an
 * action larger than that alone in its batch).
 */
export function bulkBatches(actions: readonly BulkAction[], maxActions: number, maxBytes: number): BulkAction[][] {
  // The request's NDJSON: one line per object, each ended by a newline.
  const sizeOf = (action: BulkAction) => action.lines.reduce((sum, line) => sum + Buffer.byteLength(JSON.stringify(line)) + 1, 0);
  return chunkedBySize(actions, { maxBytes, maxItems: maxActions, sizeOf });
}

/**
 * One batch of actions into one target; items OpenSearch pushes back on (429) are sent again with
 * backoff, any other rejected item fails the call with SearchIndexWriteError.
 */
export async function sendBulk(
  client: Client,
  target: WriteTarget,
  actions: BulkAction[],
  settings: { refresh: boolean | 'wait_for'; log: SearchLogger; what: string },
): Promise<void> {
  let pending = actions;
  for (let attempt = 1; pending.length > 0; attempt += 1) {
    const response = await client.bulk({
      index: target.index,
      require_alias: target.viaAlias,
      refresh: settings.refresh === 'wait_for' ? 'wait_for' : settings.refresh,
      body: pending.flatMap((action) => action.lines),
    });
    const body = response.body as BulkItems;
    if (!body.errors) return;
    const retry: BulkAction[] = [];
    const failures: { id: string; status: number; reason: string }[] = [];
    body.items.forEach((item, position) => {
      const result = Object.values(item)[0];
      const action = pending[position];
      if (!result.error) return;
      if (result.status === 404 && action.missingIsFine) return;
      if (result.status === 429 && attempt < 5) retry.push(action);
      else failures.push({ id: action.id, status: result.status, reason: `${result.error.type}: ${result.error.reason}` });
    });
    if (failures.length > 0) {
      throw new SearchIndexWriteError(
        `${failures.length} of ${pending.length} ${settings.what} were not indexed into ${target.index}: ${failures.slice(0, 3).map((failure) => `${failure.id} (${failure.reason})`).join('; ')}`,
        failures,
      );
    }
    if (retry.length === 0) return;
    settings.log.warn({ index: target.index, rejected: retry.length, attempt }, `search index pushed back on a bulk request; retrying those ${settings.what}`);
    await sleep(200 * 2 ** attempt);
    pending = retry;
  }
}

/** The deletions of one round of a repository's removal; a document deleted meanwhile (404) is what we want. */
export function failedDeletions(body: unknown): { type?: string; reason?: string }[] {
  return (body as BulkItems).items
    .map((item) => Object.values(item)[0])
    .filter((result) => result.error && result.status !== 404)
    .map((result) => result.error ?? {});
}
