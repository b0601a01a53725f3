import t from 'tap';
import { isRebalanceNotice } from '../../src/bus/kafka.js';

t.test("kafkajs's notices of a group rebalancing are told from its other warnings and errors", async (t) => {
  // What kafkajs 2 logs when a member joins: the consumer runner's warning, and the connection's error for the heartbeat.
  t.ok(isRebalanceNotice('The group is rebalancing, re-joining', { groupId: 'g', error: 'The group is rebalancing, so a rejoin is needed' }));
  t.ok(isRebalanceNotice('Response Heartbeat(key: 12, version: 3)', { error: 'The group is rebalancing, so a rejoin is needed', correlationId: 7 }));
  t.notOk(isRebalanceNotice('Response Metadata(key: 3, version: 6)', { error: 'There is no leader for this topic-partition as we are in the middle of a leadership election' }));
  t.notOk(isRebalanceNotice('Connection error: connect ECONNREFUSED 127.0.0.1:19092', {}));
  t.notOk(isRebalanceNotice('Crash: KafkaJSNumberOfRetriesExceeded', { error: 'rebalance timed out' }), 'a failed rebalance is not routine');
});
