import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository, type RepositoryRow } from '../app/access.js';
import { invalid } from '../app/errors.js';
import { DomainError } from '../domain/decider.js';
import { principalCan, repositoryDomain, type Principal } from '../auth/rbac.js';
import { shortenRunes } from '../domain/text.js';
import { parseStreamName, streamCategories } from '../eventstore/envelope.js';
import { pageOf } from './paging.js';
import { presentEvent } from './present.js';

export interface EventListInput {
  repository: string;
  /** Events after this global position (exclusive); the reply's `next_from` reads on. */
  from?: number;
  /** Only these event types. */
  types?: readonly string[];
  stream?: string;
  limit?: number;
}

const MAX_EVENTS = 1000;

/** Who holds which role: the repository's members, which only `members:read` may see (docs/auth.md). */
const MEMBERSHIP_EVENT_TYPES: ReadonlySet<string> = new Set(['RoleGranted', 'RoleRevoked']);

/** Names a refusal repeats: at most ten, each at most 100 characters, as the REST layer's own refusals do (src/api/errors.ts). */
function namesOf(names: readonly string[]): string {
  const listed = names.slice(0, 10).map((name) => shortenRunes(name, 100));
  if (names.length > 10) listed.push(`${names.length - 10} more`);
  return listed.join(', ');
}

/**
 * A stream filter names a stream the log could hold (`<category>-<id>`, docs/events.md): any other
 * name would filter every event out, an empty page that reads as no history.
 */
function checkStreamName(stream: string): void {
  const { category, id } = parseStreamName(stream);
  if (!streamCategories.some((known) => known === category) || id === '') {
    throw invalid(`stream must be <category>-<id>, the category one of ${streamCategories.join(', ')} (docs/events.md)`);
  }
}

/**
 * The repository whose history a caller reads: a live one (by id or slug) where the caller may
 * read events; or a deleted one, named by its id, for a caller whose `events:read` still covers
 * it (a sysadmin's covers every repository), so that an auditor reads its log through its
 * RepositoryDeleted. Anyone else gets the 404 of an id never used: whether a deleted id was a
 * repository is not told them. A slug is not followed to a deleted repository: it is released
 * at the deletion and may name another one since.
 */
async function historyOf(knex: Knex, principal: Principal, idOrSlug: string): Promise<RepositoryRow> {
  try {
    return await authorizeRepository(knex, principal, idOrSlug, 'events:read');
  } catch (error) {
    if (!(error instanceof DomainError) || error.code !== 'not_found') throw error;
    const deleted: RepositoryRow | undefined = await knex('repositories').where({ id: idOrSlug }).whereNotNull('deleted_at').first();
    if (deleted === undefined || !principalCan(principal, repositoryDomain(deleted.id), 'events:read')) throw error;
    return deleted;
  }
}

/** History: a repository's events in log order (a deleted one's too, for those who still may read it: historyOf). */
export function eventQueries(deps: Pick<AppContext, 'db' | 'store' | 'schemas'>) {
  return {
    async list(principal: Principal, input: EventListInput) {
      const repository = await historyOf(deps.db.knex, principal, input.repository);
      const { from = 0, types, stream } = input;
      if (!Number.isInteger(from) || from < 0) throw invalid('from must be a non-negative integer');
      if (types !== undefined && types.length === 0) throw invalid('types must name at least one event type (leave it out for every type)');
      if (types?.some((type) => type === '')) throw invalid('types must be event types separated by single commas: it holds an empty one');
      if (stream !== undefined) checkStreamName(stream);
      // A misspelt type would filter every event out: an empty page that looks like no history.
      const unknown = (types ?? []).filter((type) => !deps.schemas.has(type));
      if (unknown.length) throw invalid(`unknown event type${unknown.length > 1 ? 's' : ''} ${namesOf(unknown)} (the event types: docs/events.md)`);
      const { limit } = pageOf({ limit: input.limit }, 100, MAX_EVENTS);
      // The head before the read: a read that ends short of `limit` has looked at every visible
      // position up to it (whatever is appended meanwhile lies past it).
      const head = await deps.store.headPosition();
      const events = await deps.store.readAll({ after: from, limit, repositoryId: repository.id, types: types?.length ? [...types] : undefined, streamId: stream });
      const seesMembers = principalCan(principal, repositoryDomain(repository.id), 'members:read');
      const shown = seesMembers ? events : events.filter((event) => !MEMBERSHIP_EVENT_TYPES.has(event.type));
      // next_from reads on past the events left out too (other repositories', other types and
      // streams, hidden ones), so a filtered poller does not look at the same stretch again; from
      // beyond the log's head it comes back to the head, so a reader polling with it sees the next event.
      const last = events.length ? events[events.length - 1].globalPosition : 0;
      const nextFrom = events.length === limit ? last : Math.max(last, head);
      return { events: shown.map(presentEvent), next_from: nextFrom };
    },
  };
}
