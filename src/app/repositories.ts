import { randomUUID } from 'node:crypto';
import { withNamedLock } from '../db/namedLock.js';
import type { Database } from '../db/database.js';
import { DomainError } from '../domain/decider.js';
import { checkSlug, repositoryDecider } from '../domain/repository/decider.js';
import { userDecider } from '../domain/user/decider.js';
import { streamName, type EventMetadata } from '../eventstore/envelope.js';
import { repositoryDomain, type Principal } from '../auth/rbac.js';
import { presentRepositoryById } from '../read/repositories.js';
import { isUuid } from '../util/uuid.js';
import { authorizeInRepository, authorizeRepository, authorizeSystem, commandMetadata, type Trace } from './access.js';
import type { CommandBus } from './commands.js';
import type { IdentityService } from '../auth/identity.js';

export interface CreateRepositoryInput {
  name: string;
  slug?: string;
  description?: string;
  preset?: string;
  tier?: string;
  accepted_promptset_hashes?: string[];
  registry_id?: string | null;
}

/** A slug from a name: lowercase ASCII words joined by hyphens. */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 56)
    .replace(/-+$/g, '');
  if (slug === '') return 'repository';
  // A name written as a UUID would give a slug that checkSlug refuses (it could name another repository).
  return isUuid(slug) ? `repository-${slug}` : slug;
}

/**
 * Repository commands that touch more than one stream or the slug reservations. Slugs are kept
 * unique by the `slug_reservations` table (service state): a slug is reserved before the event
 * that uses it is appended, and released when the repository is renamed away or deleted.
 */
export function createRepositoryService(deps: { db: Database; commands: CommandBus; defaultPreset: string }) {
  const { commands } = deps;
  const knex = deps.db.knex;

  async function reserveSlug(slug: string, repositoryId: string): Promise<boolean> {
    const inserted = await knex('slug_reservations').insert({ slug, repository_id: repositoryId }).onConflict('slug').ignore().returning('slug');
    return inserted.length > 0;
  }
  const releaseSlug = (slug: string, repositoryId: string) => knex('slug_reservations').where({ slug, repository_id: repositoryId }).delete();

  /** The repository and its owner's role, made inside the fence's step that `create` holds. */
  async function createUnfenced(input: CreateRepositoryInput, metadata: Omit<EventMetadata, 'repositoryId'>, ownerId: string | null): Promise<string> {
    const repositoryId = randomUUID();
    let slug = input.slug ?? slugify(input.name);
    checkSlug(slug);
    if (!(await reserveSlug(slug, repositoryId))) {
      if (input.slug) throw new DomainError('conflict', `slug '${slug}' is taken`);
      // A derived slug gets a short suffix rather than failing the request.
      slug = `${slug}-${repositoryId.slice(0, 6)}`;
      if (!(await reserveSlug(slug, repositoryId))) throw new DomainError('conflict', `slug '${slug}' is taken`);
    }
    const fullMetadata = { ...metadata, repositoryId };
    try {
      await commands.execute(
        streamName('repository', repositoryId),
        repositoryDecider,
        {
          type: 'CreateRepository',
          name: input.name,
          slug,
          description: input.description ?? '',
          preset: input.preset ?? deps.defaultPreset,
          tier: input.tier ?? 'shared',
          acceptedPromptsetHashes: input.accepted_promptset_hashes ?? [],
          registryId: input.registry_id ?? null,
        },
        fullMetadata,
        { newStream: true },
      );
    } catch (error) {
      await releaseSlug(slug, repositoryId);
      throw error;
    }
    if (ownerId) {
      await commands.execute(
        streamName('user', ownerId),
        userDecider,
        { type: 'GrantRole', role: 'owner', domain: repositoryDomain(repositoryId) },
        fullMetadata,
      );
    }
    return repositoryId;
  }

  return {
    /**
     * Creates a repository; `ownerId` (when given) receives the `owner` role on it. Its two
     * commands (the repository, then its owner's role) are one step of the fence, in no repository
     * (where `repositories:create` was allowed): the caller's credential and that permission are
     * checked once, before the slug is reserved, and an end of the credential waits for both
     * commands, so a logout or a key's revocation lands before the creation (403, nothing made) or
     * after all of it, never between the repository and its owner.
     */
    create(input: CreateRepositoryInput, metadata: Omit<EventMetadata, 'repositoryId'>, ownerId: string | null) {
      return commands.step({ ...metadata, repositoryId: null }, 'acts', () => createUnfenced(input, metadata, ownerId));
    },

    /**
     * One update of a repository at a time (across processes on a server): each reads the slug it
     * replaces after the previous one appended. Two renames side by side both read the old slug,
     * and the one appended first kept its new slug reserved after the other renamed past it,
     * where no repository could take it again.
     */
    update(repositoryId: string, change: RepositoryChange, metadata: EventMetadata) {
      const updateOnce = async () => {
        const current = await knex('repositories').where({ id: repositoryId }).first('slug');
        const newSlug = change.slug !== undefined && change.slug !== current?.slug ? change.slug : undefined;
        if (newSlug !== undefined) {
          checkSlug(newSlug);
          if (!(await reserveSlug(newSlug, repositoryId))) throw new DomainError('conflict', `slug '${newSlug}' is taken`);
        }
        try {
          await commands.execute(
            streamName('repository', repositoryId),
            repositoryDecider,
            {
              type: 'UpdateRepository',
              name: change.name,
              slug: change.slug,
              description: change.description,
              acceptedPromptsetHashes: change.accepted_promptset_hashes,
            },
            metadata,
          );
        } catch (error) {
          if (newSlug !== undefined) await releaseSlug(newSlug, repositoryId);
          throw error;
        }
        if (newSlug !== undefined && current) await releaseSlug(current.slug, repositoryId);
      };
      return withNamedLock(deps.db, `factlog.repository-update.${repositoryId}`, updateOnce, 'exclusive', ['repositories']);
    },

    async remove(repositoryId: string, metadata: EventMetadata) {
      await commands.execute(streamName('repository', repositoryId), repositoryDecider, { type: 'DeleteRepository' }, metadata, { changesAccess: true });
      await knex('slug_reservations').where({ repository_id: repositoryId }).delete();
    },
  };
}

export type RepositoryService = ReturnType<typeof createRepositoryService>;

export type RepositoryChange = { name?: string; slug?: string; description?: string; accepted_promptset_hashes?: string[] };

/**
 * Repository commands for a caller: create (the caller becomes owner), update, delete. Its parts
 * named as types: AppContext holds this module's RepositoryService, so picking from it here
 * would make each module's types depend on the other's.
 */
export function repositoryCommands(deps: { db: Database; repositories: RepositoryService; identity: IdentityService }) {
  const knex = deps.db.knex;
  return {
    async create(principal: Principal, input: CreateRepositoryInput, trace?: Trace) {
      authorizeSystem(principal, 'repositories:create');
      const repositoryId = await deps.repositories.create(input, commandMetadata(principal, null, trace), principal.userId);
      // The caller just became owner: show the role in the answer.
      const owner = { ...principal, assignments: await deps.identity.roleAssignments(principal.userId) };
      return presentRepositoryById(knex, repositoryId, owner);
    },

    /** Changing the accepted promptset hashes is a setting: it needs `repositories:manage` too. */
    async update(principal: Principal, input: RepositoryChange & { repository: string }, trace?: Trace) {
      const { repository: idOrSlug, ...change } = input;
      const repository = await authorizeRepository(knex, principal, idOrSlug, 'repositories:write');
      if (change.accepted_promptset_hashes !== undefined) authorizeInRepository(principal, repository.id, 'repositories:manage');
      await deps.repositories.update(repository.id, change, commandMetadata(principal, repository.id, trace));
      return presentRepositoryById(knex, repository.id, principal);
    },

    async remove(principal: Principal, input: { repository: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'repositories:delete');
      await deps.repositories.remove(repository.id, commandMetadata(principal, repository.id, trace));
    },
  };
}
