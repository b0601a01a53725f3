import { DomainError, type Decider } from '../decider.js';
import type { FactCommand, FactEvent, FactState } from './events.js';

export type { FactCommand, FactEvent, FactState } from './events.js';

/**
 * What deduplication and cleanup decide about a fact (docs/pipeline.md, "Deduplication rule").
 * A fact's stream starts empty: the fact itself is born in its source's FactsExtracted, so the
 * initial state is `new`. Repeated decisions (a twin job, a retried one) record nothing.
 */
export const factDecider: Decider<FactState, FactCommand, FactEvent> = {
  initialState: () => ({ status: 'new' }),

  decide(command, current) {
    // A retracted fact extracted again (by another source) is decided about as a new one.
    const state: FactState = current.status === 'retracted' ? { status: 'new' } : current;
    switch (command.type) {
      case 'StabilizeFact':
        // Only a new fact is stabilized; a stable one already is, a merged one stays merged.
        if (state.status !== 'new') return [];
        return [{ type: 'FactStabilized', data: { source_id: command.sourceId } }];
      case 'MergeFact':
        if (state.status === 'merged' || state.status === 'removed') return [];
        // A deduplication job merges a fact it found new. If a twin stabilized the fact meanwhile,
        // that decision stands: re-applying this merge on a version conflict could close a cycle
        // with a neighbour that merged into this fact because it saw it stable, and a cycle has
        // no survivor. Only the catch-up pass merges a stable fact (the larger id into the smaller).
        if (state.status === 'stable' && !command.catchup) return [];
        if (!command.survivorId) throw new DomainError('invalid', 'a merge needs a survivor');
        if (!Number.isFinite(command.similarity)) throw new DomainError('invalid', 'similarity must be a finite number');
        return [
          {
            type: 'FactMergedInto',
            data: {
              survivor_id: command.survivorId,
              similarity: command.similarity,
              source_id: command.sourceId,
              catchup: command.catchup,
            },
          },
        ];
      case 'RemoveFact':
        if (state.status === 'removed') return [];
        if (state.status !== 'merged') throw new DomainError('conflict', `only a merged fact is removed; this one is ${state.status}`);
        return [{ type: 'FactRemoved', data: { survivor_id: state.survivorId } }];
      case 'RetractFact':
        // Retracted already, or merged (its links live on the survivor, which is decided about itself).
        if (current.status !== 'new' && current.status !== 'stable') return [];
        return [{ type: 'FactRetracted', data: { source_id: command.sourceId, reason: command.reason } }];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'FactStabilized':
        // decide() stabilizes a retracted fact extracted again as it would a new one.
        return state.status === 'new' || state.status === 'retracted' ? { status: 'stable' } : state;
      case 'FactMergedInto':
        return { status: 'merged', survivorId: event.data.survivor_id };
      case 'FactRemoved':
        return { status: 'removed', survivorId: event.data.survivor_id };
      case 'FactRetracted':
        return { status: 'retracted' };
    }
  },
};
