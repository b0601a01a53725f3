import { DomainError, type Decider } from '../decider.js';
import { findPreset } from './presets.js';

export const SLUG_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

export type RepositoryEvent =
  | {
      type: 'RepositoryCreated';
      data: {
        name: string;
        slug: string;
        description: string;
        preset: string;
        tier: string;
        accepted_promptset_hashes: string[];
        registry_id: string | null;
      };
    }
  | {
      type: 'RepositoryUpdated';
      data: { name: string | null; slug: string | null; description: string | null; accepted_promptset_hashes: string[] | null };
    }
  | { type: 'RepositoryDeleted'; data: { reason: string | null } };

export type RepositoryCommand =
  | {
      type: 'CreateRepository';
      name: string;
      slug: string;
      description: string;
      preset: string;
      tier: string;
      acceptedPromptsetHashes: string[];
      registryId: string | null;
    }
  | {
      type: 'UpdateRepository';
      name?: string;
      slug?: string;
      description?: string;
      acceptedPromptsetHashes?: string[];
    }
  | { type: 'DeleteRepository'; reason?: string };

export type RepositoryState =
  | { status: 'none' }
  | { status: 'active' | 'deleted'; name: string; slug: string; description: string; acceptedPromptsetHashes: string[] };

function checkName(name: string): void {
  if (name.trim().length === 0 || name.length > 200) throw new DomainError('invalid', 'name must be 1 to 200 characters');
}
export function checkSlug(slug: string): void {
  if (!SLUG_PATTERN.test(slug))
    throw new DomainError('invalid', 'slug must be 1 to 64 lowercase letters, digits or inner hyphens');
}

export const repositoryDecider: Decider<RepositoryState, RepositoryCommand, RepositoryEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'CreateRepository': {
        if (state.status !== 'none') throw new DomainError('conflict', 'repository already exists');
        checkName(command.name);
        checkSlug(command.slug);
        if (!findPreset(command.preset)) throw new DomainError('invalid', `unknown preset '${command.preset}'`);
        return [
          {
            type: 'RepositoryCreated',
            data: {
              name: command.name.trim(),
              slug: command.slug,
              description: command.description,
              preset: command.preset,
              tier: command.tier,
              accepted_promptset_hashes: command.acceptedPromptsetHashes,
              registry_id: command.registryId,
            },
          },
        ];
      }
      case 'UpdateRepository': {
        if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
        if (state.status === 'deleted') throw new DomainError('gone', 'repository was deleted');
        if (command.name !== undefined) checkName(command.name);
        if (command.slug !== undefined) checkSlug(command.slug);
        const changed = {
          name: command.name !== undefined && command.name.trim() !== state.name ? command.name.trim() : null,
          slug: command.slug !== undefined && command.slug !== state.slug ? command.slug : null,
          description:
            command.description !== undefined && command.description !== state.description ? command.description : null,
          accepted_promptset_hashes:
            command.acceptedPromptsetHashes !== undefined &&
            JSON.stringify(command.acceptedPromptsetHashes) !== JSON.stringify(state.acceptedPromptsetHashes)
              ? command.acceptedPromptsetHashes
              : null,
        };
        // An update that changes nothing records nothing.
        if (Object.values(changed).every((value) => value === null)) return [];
        return [{ type: 'RepositoryUpdated', data: changed }];
      }
      case 'DeleteRepository': {
        if (state.status === 'none') throw new DomainError('not_found', 'repository not found');
        if (state.status === 'deleted') return [];
        return [{ type: 'RepositoryDeleted', data: { reason: command.reason ?? null } }];
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'RepositoryCreated':
        return {
          status: 'active',
          name: event.data.name,
          slug: event.data.slug,
          description: event.data.description,
          acceptedPromptsetHashes: event.data.accepted_promptset_hashes,
        };
      case 'RepositoryUpdated':
        if (state.status === 'none') return state;
        return {
          ...state,
          name: event.data.name ?? state.name,
          slug: event.data.slug ?? state.slug,
          description: event.data.description ?? state.description,
          acceptedPromptsetHashes: event.data.accepted_promptset_hashes ?? state.acceptedPromptsetHashes,
        };
      case 'RepositoryDeleted':
        if (state.status === 'none') return state;
        return { ...state, status: 'deleted' };
    }
  },
};
