import type { AppContext } from '../app/context.js';
import { authorizeRepository } from '../app/access.js';
import { invalid } from '../app/errors.js';
import { principalCan, repositoryDomain, type Principal } from '../auth/rbac.js';
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

export const MAX_EVENTS = 1000;

/** Who holds which role: the repository's members, which only `members:read` may see (docs/auth.md). */
const MEMBERSHIP_EVENT_TYPES: ReadonlySet<string> = new Set(['RoleGranted', 'RoleRevoked']);

/** History: a repository's events in log order. */
export function eventQueries(deps: Pick<AppContext, 'db' | 'store' | 'schemas'>) {
  return {
    async list(principal: Principal, input: EventListInput) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'events:read');
      const { from = 0, types, stream } = input;
      if (!Number.isInteger(from) || from < 0) throw invalid('from must be a non-negative integer');
      // A misspelt type would filter every event out: an empty page that looks like no history.
      const unknown = (types ?? []).filter((type) => !deps.schemas.has(type));
      if (unknown.length) throw invalid(`unknown event type${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} (the event types: docs/events.md)`);
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

export type EventQueries = ReturnType<typeof eventQueries>;
