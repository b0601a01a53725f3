import t from 'tap';
import pino from 'pino';
import { buildConfig } from '../../../src/config/index.js';
import { openBus } from '../../../src/app/wiring/bus.js';
import { EventSchemaRegistry } from '../../../src/eventstore/schemas.js';

t.test('a Kafka that cannot be reached is named with its brokers and the setting that lists them', async (t) => {
  // Port 1: nothing listens there, so every connection is refused at once.
  const config = buildConfig({ bus: { backend: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } });
  // One retry after 10 ms instead of kafkajs's five from 300 ms (about 12 s): the failure is the
  // same one, reported after the client's last retry.
  const bus = await openBus(config, await EventSchemaRegistry.load(), pino({ level: 'silent' }), { retry: { retries: 1, initialRetryTimeMs: 10 } });
  if (bus === null) throw new Error('bus.backend kafka opened no bus');
  t.teardown(() => bus.close());
  await t.rejects(
    bus.consume({ group: 'trial', types: ['SourceRegistered'], handler: async () => undefined }),
    { message: /^cannot use Kafka at 127\.0\.0\.1:1 \(bus\.kafka\.brokers, BUS_KAFKA_BROKERS\): .*ECONNREFUSED/ },
  );
});
