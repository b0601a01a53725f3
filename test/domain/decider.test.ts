import t from 'tap';
import { DomainError, foldEvents } from '../../src/domain/decider.js';
import { spec } from '../../src/domain/testing.js';

type Ev = { type: 'Added'; data: { n: number } };
const counter = {
  initialState: () => 0,
  evolve: (s: number, e: Ev) => s + e.data.n,
  decide: (c: { add: number }, s: number): Ev[] => {
    if (s + c.add > 10) throw new DomainError('invalid', 'too big');
    return [{ type: 'Added', data: { n: c.add } }];
  },
};

t.test('spec runs given/when/then', async (t) => {
  t.same(spec(counter).given([{ type: 'Added', data: { n: 3 } }]).when({ add: 2 }).events(), [
    { type: 'Added', data: { n: 2 } },
  ]);
  const err = spec(counter).given([{ type: 'Added', data: { n: 9 } }]).when({ add: 2 }).thenThrows(DomainError);
  t.equal(err.code, 'invalid');
  t.throws(() => spec(counter).given([]).when({ add: 1 }).thenThrows(DomainError));
  t.equal(foldEvents(counter, [{ type: 'Added', data: { n: 4 } }]), 4);
});
