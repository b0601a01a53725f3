import { randomUUID } from 'node:crypto';
import { withNamedLock } from '../db/namedLock.js';
import { DomainError } from '../domain/decider.js';
import { investigationDecider, MAX_INVESTIGATION_SOURCES, type InvestigationCommand } from '../domain/investigation/decider.js';
import { streamName, type EventMetadata } from '../eventstore/envelope.js';
import type { Principal } from '../auth/rbac.js';
import { liveSourceCount, loadInvestigation, presentInvestigationById } from '../read/investigations.js';
import { loadSource } from '../read/sources.js';
import { presentSource } from '../read/present.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { invalid } from './errors.js';
import { sourceCommands, withSourceLock } from './sources.js';

export interface InvestigationChange {
  title?: string;
  topic?: string;
}

/** What an investigation gathers: a source of the repository by id, or a URL or DOI to add. */
export type InvestigationSourceInput = { source_id: string } | { url: string } | { doi: string };

/**
 * Investigation commands: create, edit, delete, and gather sources. Adding a URL or DOI
 * registers the source in the repository (or takes the one it has) and links it; the pipeline
 * processes it as any other source.
 */
export function investigationCommands(deps: Pick<AppContext, 'db' | 'commands' | 'assets' | 'jobs' | 'config' | 'wakeWorkers' | 'store' | 'projections'>) {
  const knex = deps.db.knex;
  const sources = sourceCommands(deps);

  const execute = (investigationId: string, command: InvestigationCommand, metadata: EventMetadata) =>
    deps.commands.execute(streamName('investigation', investigationId), investigationDecider, command, metadata);

  /**
   * An edit, from its write to the read its answer comes from, and a deletion of the
   * investigation, one at a time (across processes on a server): a deletion that landed between
   * an edit's write and its read made the edit answer 404 although it was stored. Now the
   * deletion comes before the edit (which is refused: gone, nothing appended) or after its answer.
   */
  const withInvestigationLock = <T>(investigationId: string, work: () => Promise<T>) => withNamedLock(deps.db, `factlog.investigation.${investigationId}`, work, 'exclusive', ['investigations']);

  /** The repository (checked for `permission`) and the investigation in it. */
  async function target(principal: Principal, input: { repository: string; investigation: string }, permission: 'investigations:write' | 'investigations:delete') {
    const repository = await authorizeRepository(knex, principal, input.repository, permission);
    const investigation = await loadInvestigation(knex, repository.id, input.investigation);
    return { repository, investigation };
  }

  return {
    async create(principal: Principal, input: { repository: string; title: string; topic?: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'investigations:create');
      const investigationId = randomUUID();
      await execute(investigationId, { type: 'CreateInvestigation', title: input.title, topic: input.topic ?? '' }, commandMetadata(principal, repository.id, trace));
      return presentInvestigationById(knex, repository.id, investigationId);
    },

    async update(principal: Principal, input: InvestigationChange & { repository: string; investigation: string }, trace?: Trace) {
      const { repository, investigation } = await target(principal, input, 'investigations:write');
      return withInvestigationLock(investigation.id, async () => {
        await execute(investigation.id, { type: 'UpdateInvestigation', title: input.title, topic: input.topic }, commandMetadata(principal, repository.id, trace));
        return presentInvestigationById(knex, repository.id, investigation.id);
      });
    },

    /** Deletes the investigation; its sources stay in the repository. */
    async remove(principal: Principal, input: { repository: string; investigation: string }, trace?: Trace) {
      const { repository, investigation } = await target(principal, input, 'investigations:delete');
      await withInvestigationLock(investigation.id, async () => {
        const { write } = await execute(investigation.id, { type: 'DeleteInvestigation' }, commandMetadata(principal, repository.id, trace));
        // Nothing appended: a deletion sent beside this one deleted it since it was loaded, as a later one would find it.
        if (write === null) throw new DomainError('gone', 'investigation was deleted');
      });
    },

    /**
     * Adds a source: an existing one by `source_id`, or a URL or DOI (registered when new, which
     * needs `sources:create` too). `added` is false when the investigation already had it.
     */
    async addSource(principal: Principal, input: { repository: string; investigation: string } & InvestigationSourceInput, trace?: Trace) {
      const { repository, investigation } = await target(principal, input, 'investigations:write');
      let sourceId: string;
      let registered = false;
      if ('source_id' in input) {
        sourceId = input.source_id;
      } else if ('url' in input || 'doi' in input) {
        const reference = 'url' in input ? { url: input.url } : { doi: input.doi };
        // A source the repository has is taken with investigations:write alone; only a new one needs sources:create.
        const known = await sources.find(repository.id, reference);
        // A new source is registered only for an investigation that can take it: a refusal after
        // the registration left a source in the repository, being processed, for a 400.
        if (!known && (await liveSourceCount(knex, investigation.id)) >= MAX_INVESTIGATION_SOURCES) {
          throw invalid(`an investigation gathers at most ${MAX_INVESTIGATION_SOURCES} sources`);
        }
        const result = known ? { source: known, created: false } : await sources.add(principal, { repository: repository.id, ...reference }, trace);
        sourceId = result.source.id;
        registered = result.created;
      } else throw invalid('give one of source_id, url or doi');
      // Read and linked while the source cannot be deleted: a source deleted first is not found (404).
      return withSourceLock(deps.db, sourceId, async () => {
        const source = presentSource(await loadSource(knex, repository.id, sourceId));
        const liveSources = await liveSourceCount(knex, investigation.id);
        const result = await execute(investigation.id, { type: 'AddInvestigationSource', sourceId: source.id, liveSources }, commandMetadata(principal, repository.id, trace));
        return { added: result.events.length > 0, registered, source };
      });
    },

    /** Removes a source from the investigation; it stays in the repository. */
    async removeSource(principal: Principal, input: { repository: string; investigation: string; source: string }, trace?: Trace) {
      const { repository, investigation } = await target(principal, input, 'investigations:write');
      // A deleted source has left every investigation already: not there to remove (404).
      await loadSource(knex, repository.id, input.source);
      await execute(investigation.id, { type: 'RemoveInvestigationSource', sourceId: input.source }, commandMetadata(principal, repository.id, trace));
    },
  };
}
