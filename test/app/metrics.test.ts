import t from 'tap';
import { createMetrics } from '../../src/app/metrics.js';

const sources = {
  projectionStatus: async () => [{ name: 'facts', lag: 2, position: 5 }],
  jobCounts: async () => ({ embed_facts: { queued: 3 } }),
};

t.test('the projections\' lag and the queues are gauges; the relay\'s lag only where there is a relay', async (t) => {
  const embedded = await createMetrics(sources).registry.metrics();
  t.match(embedded, /^factlog_projection_lag_events\{projection="facts"\} 2$/m);
  t.match(embedded, /^factlog_stage_queue_depth\{kind="embed_facts",state="queued"\} 3$/m);
  t.notMatch(embedded, /factlog_relay_lag_events/, 'no relay on the embedded tier');

  let owed = 7;
  const distributed = createMetrics({ ...sources, relayLag: async () => owed });
  t.match(await distributed.registry.metrics(), /^factlog_relay_lag_events 7$/m);
  owed = 0;
  t.match(await distributed.registry.metrics(), /^factlog_relay_lag_events 0$/m, 'read at each scrape');
});
