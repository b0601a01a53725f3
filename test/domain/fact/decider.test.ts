import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { factDecider, type FactEvent } from '../../../src/domain/fact/decider.js';
import { spec } from '../../../src/domain/testing.js';

const given = spec(factDecider).given;
const stabilized: FactEvent = { type: 'FactStabilized', data: { source_id: 's1' } };
const merged: FactEvent = { type: 'FactMergedInto', data: { survivor_id: 'f0', similarity: 0.97, source_id: 's1', catchup: false } };
const removed: FactEvent = { type: 'FactRemoved', data: { survivor_id: 'f0' } };
const merge = { type: 'MergeFact', survivorId: 'f0', similarity: 0.97, sourceId: 's1', catchup: false } as const;

t.test('a new fact is stabilized once', async (t) => {
  t.same(given([]).when({ type: 'StabilizeFact', sourceId: 's1' }).events(), [stabilized]);
  t.same(given([stabilized]).when({ type: 'StabilizeFact', sourceId: 's2' }).events(), [], 'already stable');
  t.same(given([merged]).when({ type: 'StabilizeFact', sourceId: 's1' }).events(), [], 'a merged fact stays merged');
  t.same(given([merged, removed]).when({ type: 'StabilizeFact', sourceId: 's1' }).events(), []);
});

t.test('new facts merge, stable ones only in the catch-up pass; merged and removed ones do not again', async (t) => {
  t.same(given([]).when(merge).events(), [merged]);
  const catchup = { ...merge, sourceId: null, catchup: true, similarity: 0.95 };
  t.same(given([stabilized]).when(catchup).events(), [
    { type: 'FactMergedInto', data: { survivor_id: 'f0', similarity: 0.95, source_id: null, catchup: true } },
  ], 'the catch-up pass merges a stable fact');
  t.same(given([merged]).when({ ...merge, survivorId: 'other' }).events(), [], 'a twin merge records nothing');
  t.same(
    given([stabilized]).when(merge).events(),
    [],
    "a job's merge of a fact a twin stabilized first records nothing (only the catch-up pass merges a stable fact)",
  );
  t.same(given([merged, removed]).when(merge).events(), []);
  t.equal(given([]).when({ ...merge, survivorId: '' }).thenThrows(DomainError).code, 'invalid');
  t.equal(given([]).when({ ...merge, similarity: Number.NaN }).thenThrows(DomainError).code, 'invalid');
});

t.test('only a merged fact is removed, once', async (t) => {
  t.same(given([merged]).when({ type: 'RemoveFact' }).events(), [removed], 'removal names the survivor the fact merged into');
  t.same(given([merged, removed]).when({ type: 'RemoveFact' }).events(), [], 'removing twice is a no-op');
  t.equal(given([]).when({ type: 'RemoveFact' }).thenThrows(DomainError).code, 'conflict');
  t.equal(given([stabilized]).when({ type: 'RemoveFact' }).thenThrows(DomainError).code, 'conflict');
});

t.test('evolve folds the status', async (t) => {
  const fold = (events: FactEvent[]) => events.reduce(factDecider.evolve, factDecider.initialState());
  t.same(fold([]), { status: 'new' });
  t.same(fold([stabilized]), { status: 'stable' });
  t.same(fold([stabilized, merged]), { status: 'merged', survivorId: 'f0' });
  t.same(fold([merged, stabilized]), { status: 'merged', survivorId: 'f0' }, 'a late stabilization does not revive a merged fact');
  t.same(fold([merged, removed]), { status: 'removed', survivorId: 'f0' });
});

t.test('a fact whose last source was deleted is retracted once; extracted again, it is decided about anew', async (t) => {
  const retract = { type: 'RetractFact', sourceId: 's1', reason: 'source deleted' } as const;
  const retracted: FactEvent = { type: 'FactRetracted', data: { source_id: 's1', reason: 'source deleted' } };
  t.same(given([]).when(retract).events(), [retracted], 'a new fact');
  t.same(given([stabilized]).when(retract).events(), [retracted], 'a stable fact');
  t.same(given([stabilized, retracted]).when(retract).events(), [], 'retracting twice records nothing');
  t.same(given([merged]).when(retract).events(), [], 'a merged fact lives on in its survivor');
  t.same(given([merged, removed]).when(retract).events(), []);
  t.same(given([stabilized, retracted]).when({ type: 'StabilizeFact', sourceId: 's2' }).events(), [{ type: 'FactStabilized', data: { source_id: 's2' } }], 'extracted again by another source');
  t.same(given([retracted]).when(merge).events(), [{ type: 'FactMergedInto', data: { survivor_id: 'f0', similarity: 0.97, source_id: 's1', catchup: false } }]);
  // Stabilized anew, it is stable again: its new source's deletion retracts it again, once.
  const again: FactEvent = { type: 'FactStabilized', data: { source_id: 's2' } };
  const retractAgain = { type: 'RetractFact', sourceId: 's2', reason: 'source deleted' } as const;
  t.same(given([stabilized, retracted, again]).when(retractAgain).events(), [{ type: 'FactRetracted', data: { source_id: 's2', reason: 'source deleted' } }]);
  t.same(given([stabilized, retracted, again]).when({ type: 'StabilizeFact', sourceId: 's3' }).events(), [], 'stable again: not stabilized twice');
  const fold = (events: FactEvent[]) => events.reduce(factDecider.evolve, factDecider.initialState());
  t.same(fold([stabilized, retracted]), { status: 'retracted' });
  t.same(fold([stabilized, retracted, again]), { status: 'stable' }, 'extracted and stabilized again');
});
