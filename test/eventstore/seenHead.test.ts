import t from 'tap';
import { SeenHead } from '../../src/eventstore/postgres.js';

t.test('SeenHead: reads make the head recent, appends only raise it', async (t) => {
  const seen = new SeenHead();
  t.equal(seen.recent(60_000), null, 'nothing read yet');
  seen.raise(5);
  t.equal(seen.recent(60_000), null, 'an append alone is not a read');
  seen.read(7);
  t.equal(seen.recent(60_000), 7);
  seen.raise(9);
  t.equal(seen.recent(60_000), 9, 'an append raises the recent head');
  seen.read(8);
  t.equal(seen.recent(60_000), 9, 'a read from before that append does not lower it');
});

t.test('SeenHead: an empty read confirms the head only where the head is known to be', async (t) => {
  const seen = new SeenHead();
  seen.nothingAfter(0);
  t.equal(seen.recent(60_000), 0, 'an empty read after 0: the log is empty');
  // A clock the test moves: with the real one, a loaded machine could pause the process for
  // more than the 2 ms window between nothingAfter and recent.
  let now = 1_000;
  const beyond = new SeenHead(() => now);
  beyond.nothingAfter(100);
  t.equal(beyond.recent(60_000), null, 'a subscription that starts past the head says nothing about it');
  beyond.read(40);
  now += 5;
  t.equal(beyond.recent(2), null, 'the read has aged past the window');
  beyond.nothingAfter(40);
  t.equal(beyond.recent(2), 40, 'nothing after the known head: still the head, recent again');
  beyond.raise(41);
  now += 5;
  beyond.nothingAfter(40);
  t.equal(beyond.recent(2), null, 'an append seen since: the empty read is older news');
});
