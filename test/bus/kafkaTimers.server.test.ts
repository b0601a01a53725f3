import t from 'tap';
import { ensureBroker, rawKafka } from './helpers.js';

// patches/kafkajs+2.2.4.patch: kafkajs's request queue set a timer of about minus the current
// time whenever it was not throttled, which Node 24 reports as a TimeoutNegativeWarning on
// every connection (in the service's log, once per client).
t.test('a Kafka client connects, asks and disconnects without a negative timer', async (t) => {
  const brokers = await ensureBroker();
  const warnings: string[] = [];
  const onWarning = (warning: Error) => void warnings.push(`${warning.name}: ${warning.message}`);
  process.on('warning', onWarning);
  t.teardown(() => void process.off('warning', onWarning));
  const admin = rawKafka(brokers).admin();
  await admin.connect();
  t.ok(Array.isArray(await admin.listTopics()), 'the broker answered');
  await admin.disconnect();
  // Warnings are emitted on the next tick.
  await new Promise((resolve) => setImmediate(resolve));
  t.same(warnings.filter((warning) => warning.startsWith('TimeoutNegativeWarning')), []);
});
