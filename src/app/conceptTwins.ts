import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { conceptDecider } from '../domain/concept/decider.js';
import { streamName } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import { commandOnSharedStream } from '../pipeline/stages/common.js';
import { finalConcept } from '../pipeline/stages/extractConcepts.js';

/** The reason the merges below record (ConceptMergedInto `reason`), and their actor's name. */
export const CONCEPT_TWIN_MERGE_REASON = 'same name under the name key';

type TwinRow = { id: string; repository_id: string; canonical_name: string; name_key: string; context: string; created_at: Date | string };

/**
 * Groups of active concepts, each group one name in one context of one repository by today's
 * name key (conceptNameKey, stored as `name_key`) that older releases recorded as two concepts:
 * before names were composed (NFC), `Café` spelt composed and decomposed had two ids; before
 * compatibility forms were folded (NFKC, migration 030), `ＡＩ` and `AI` had. Oldest first (then
 * by id), as the merge keeps the oldest. Only the concepts whose key another active concept of
 * the repository shares are read (the index on repository and key); their contexts, compared
 * as concept ids compare them, split the rest.
 */
async function conceptTwins(knex: Knex): Promise<TwinRow[][]> {
  const sharedKeys = knex('concepts').where('status', 'active').groupBy('repository_id', 'name_key').havingRaw('count(*) > 1').select('repository_id', 'name_key');
  const rows: TwinRow[] = await knex('concepts')
    .where('status', 'active')
    .whereIn(['repository_id', 'name_key'], sharedKeys)
    .select('id', 'repository_id', 'canonical_name', 'name_key', 'context', 'created_at');
  const groups = new Map<string, TwinRow[]>();
  for (const row of rows) {
    const identity = JSON.stringify([row.repository_id, row.name_key, row.context.trim().toLowerCase()]);
    groups.set(identity, [...(groups.get(identity) ?? []), row]);
  }
  const time = (row: TwinRow) => new Date(row.created_at).getTime();
  return [...groups.values()]
    .filter((group) => group.length > 1)
    .map((group) => group.sort((a, b) => time(a) - time(b) || a.id.localeCompare(b.id)));
}

/**
 * Heals what the NFC and NFKC changes left: each group of conceptTwins is merged into its oldest concept
 * with the concept decider's MergeConcept, as refine_concepts merges (ConceptMergedInto: the
 * projections move aliases and fact links, search drops the merged one, summaries follow).
 * Idempotent: a merged concept is no twin any more, and MergeConcept on one records nothing.
 * Run at start-up (src/app/context.ts); returns how many concepts it merged.
 */
export async function mergeConceptTwins(knex: Knex, store: EventStore): Promise<number> {
  let merged = 0;
  for (const [oldest, ...younger] of await conceptTwins(knex)) {
    // The read model may lag the streams: decide on the streams, as refine_concepts does.
    const survivor = await finalConcept(store, oldest.id);
    if (survivor.state.status !== 'active') continue;
    const metadata = { repositoryId: oldest.repository_id, actor: 'system:concept-twins', causationId: null, correlationId: null };
    for (const twin of younger) {
      const loser = await finalConcept(store, twin.id);
      if (loser.id !== twin.id || loser.state.status !== 'active' || loser.id === survivor.id) continue;
      const result = await commandOnSharedStream(
        store,
        streamName('concept', twin.id),
        conceptDecider,
        { type: 'MergeConcept', survivorId: survivor.id, reason: CONCEPT_TWIN_MERGE_REASON },
        metadata,
      );
      if (result.events.length > 0) merged += 1;
    }
  }
  return merged;
}

/** mergeConceptTwins at start-up: logged, and never fatal (the service serves with the twins as before; the next start tries again). */
export async function healConceptTwins(knex: Knex, store: EventStore, log: Logger): Promise<void> {
  try {
    const merged = await mergeConceptTwins(knex, store);
    if (merged > 0) log.info({ merged }, 'concepts recorded twice before names were composed (NFC) merged into their oldest twin');
  } catch (error) {
    log.warn({ err: error }, 'concept twins from before names were composed (NFC) were not merged; the next start tries again');
  }
}
