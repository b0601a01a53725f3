import t from 'tap';
import { topicCategory, validateConsumerOptions, type BusConsumerOptions } from '../../src/bus/port.js';

const handler = async () => undefined;

t.test('validateConsumerOptions refuses what no adapter can consume', async (t) => {
  t.doesNotThrow(() => validateConsumerOptions({ group: 'projection.facts', types: ['FactsExtracted'], handler }));
  t.throws(() => validateConsumerOptions({ group: '', types: ['ThingHappened'], handler }), /group must be a non-empty string/);
  t.throws(() => validateConsumerOptions({ group: '  ', types: ['ThingHappened'], handler }), /group must be a non-empty string/);
  t.throws(() => validateConsumerOptions({ group: 'g', types: [], handler }), /types must name at least one event type/);
  t.throws(() => validateConsumerOptions({ group: 'g', types: [''], handler }), /every type must be a non-empty string/);
  // What plain JavaScript callers (and bad casts) can pass despite the types.
  const untyped = (options: Record<string, unknown>) => options as unknown as BusConsumerOptions;
  t.throws(() => validateConsumerOptions(untyped({ group: 'g', types: 'ThingHappened', handler })), RangeError);
  t.throws(() => validateConsumerOptions(untyped({ group: 'g', types: ['ThingHappened'] })), /handler must be a function/);
});

t.test('topicCategory names the topic of a stream by its category, in the plural', async (t) => {
  t.equal(topicCategory('source-1'), 'sources');
  t.equal(topicCategory('repository-2'), 'repositories');
  t.equal(topicCategory('news-3'), 'news', 'already plural');
  t.equal(topicCategory('user'), 'users', 'a stream without an id');
  t.equal(topicCategory('apikey-4'), 'apikeys', 'a vowel before the y: keys, not keies');
  t.equal(topicCategory('survey-5'), 'surveys');
  t.equal(topicCategory('category-6'), 'categories', 'a consonant before the y');
});
