import { DomainError, type Decider } from '../decider.js';
import { checkedTitle } from '../text.js';
import { runeLength } from '../../util/codePoints.js';

export const MAX_INVESTIGATION_TITLE_CHARS = 200;
export const MAX_INVESTIGATION_TOPIC_CHARS = 2000;
/** Sources one investigation may gather: enough for a literature review, small enough to list. */
export const MAX_INVESTIGATION_SOURCES = 1000;

/**
 * An investigation gathers sources of one repository around a question (`topic`). Its stream
 * (`investigation-<id>`) records what was asked and which sources were gathered; the sources
 * themselves live in their own streams and are shared with the rest of the repository.
 */
export type InvestigationEvent =
  | { type: 'InvestigationCreated'; data: { title: string; topic: string } }
  /** Changed fields; null means unchanged. */
  | { type: 'InvestigationUpdated'; data: { title: string | null; topic: string | null } }
  | { type: 'InvestigationDeleted'; data: { reason: string | null } }
  | { type: 'InvestigationSourceAdded'; data: { source_id: string } }
  /** The source stays in the repository; only the investigation lets it go. */
  | { type: 'InvestigationSourceRemoved'; data: { source_id: string } };

export type InvestigationCommand =
  | { type: 'CreateInvestigation'; title: string; topic: string }
  | { type: 'UpdateInvestigation'; title?: string; topic?: string }
  | { type: 'DeleteInvestigation'; reason?: string }
  /**
   * `liveSources`: how many of its sources are not deleted, as the read models have them. A
   * deleted source leaves the investigation's list but not its stream, so the cap counts these.
   */
  | { type: 'AddInvestigationSource'; sourceId: string; liveSources: number }
  | { type: 'RemoveInvestigationSource'; sourceId: string };

export type InvestigationState =
  | { status: 'none' }
  | { status: 'active' | 'deleted'; title: string; topic: string; sourceIds: ReadonlySet<string> };

function checkTitle(title: string): string {
  return checkedTitle(title, MAX_INVESTIGATION_TITLE_CHARS, 'investigation title');
}

function checkTopic(topic: string): string {
  const trimmed = topic.trim();
  if (runeLength(trimmed) > MAX_INVESTIGATION_TOPIC_CHARS) throw new DomainError('invalid', `topic must be at most ${MAX_INVESTIGATION_TOPIC_CHARS} characters`);
  return trimmed;
}

function requireActive(state: InvestigationState): Exclude<InvestigationState, { status: 'none' }> {
  if (state.status === 'none') throw new DomainError('not_found', 'investigation not found');
  if (state.status === 'deleted') throw new DomainError('gone', 'investigation was deleted');
  return state;
}

export const investigationDecider: Decider<InvestigationState, InvestigationCommand, InvestigationEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    switch (command.type) {
      case 'CreateInvestigation': {
        if (state.status !== 'none') throw new DomainError('conflict', 'investigation already exists');
        return [{ type: 'InvestigationCreated', data: { title: checkTitle(command.title), topic: checkTopic(command.topic) } }];
      }
      case 'UpdateInvestigation': {
        const investigation = requireActive(state);
        const title = command.title === undefined ? null : checkTitle(command.title);
        const topic = command.topic === undefined ? null : checkTopic(command.topic);
        const changed = {
          title: title !== null && title !== investigation.title ? title : null,
          topic: topic !== null && topic !== investigation.topic ? topic : null,
        };
        if (changed.title === null && changed.topic === null) return [];
        return [{ type: 'InvestigationUpdated', data: changed }];
      }
      case 'DeleteInvestigation': {
        if (state.status === 'none') throw new DomainError('not_found', 'investigation not found');
        if (state.status === 'deleted') return [];
        return [{ type: 'InvestigationDeleted', data: { reason: command.reason ?? null } }];
      }
      case 'AddInvestigationSource': {
        const investigation = requireActive(state);
        // Adding a source the investigation has is answered with it, not an error (like adding a known URL).
        if (investigation.sourceIds.has(command.sourceId)) return [];
        if (Math.min(investigation.sourceIds.size, command.liveSources) >= MAX_INVESTIGATION_SOURCES) {
          throw new DomainError('invalid', `an investigation gathers at most ${MAX_INVESTIGATION_SOURCES} sources`);
        }
        return [{ type: 'InvestigationSourceAdded', data: { source_id: command.sourceId } }];
      }
      case 'RemoveInvestigationSource': {
        const investigation = requireActive(state);
        if (!investigation.sourceIds.has(command.sourceId)) throw new DomainError('not_found', 'the investigation has no such source');
        return [{ type: 'InvestigationSourceRemoved', data: { source_id: command.sourceId } }];
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'InvestigationCreated':
        return { status: 'active', title: event.data.title, topic: event.data.topic, sourceIds: new Set() };
      case 'InvestigationUpdated':
        if (state.status === 'none') return state;
        return { ...state, title: event.data.title ?? state.title, topic: event.data.topic ?? state.topic };
      case 'InvestigationDeleted':
        if (state.status === 'none') return state;
        return { ...state, status: 'deleted' };
      case 'InvestigationSourceAdded':
        if (state.status === 'none') return state;
        return { ...state, sourceIds: new Set([...state.sourceIds, event.data.source_id]) };
      case 'InvestigationSourceRemoved': {
        if (state.status === 'none') return state;
        const sourceIds = new Set(state.sourceIds);
        sourceIds.delete(event.data.source_id);
        return { ...state, sourceIds };
      }
    }
  },
};
