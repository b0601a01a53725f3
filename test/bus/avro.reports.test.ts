import t from 'tap';
import { decodeEvent, encodeEvent } from '../../src/bus/avro.js';
import type { ReportEvent } from '../../src/domain/report/decider.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';

/** Report events as the distributed tier carries them: Avro on the wire, the same data after decoding. */
t.test('report events survive the Avro wire format', async (t) => {
  const registry = await EventSchemaRegistry.load();
  const events: ReportEvent[] = [
    { type: 'ReportCreated', data: { title: 'Curie', text: '# Curie\n\nText.', topic: null, parent_id: 'p-1', origin: 'upload', filename: 'curie.md' } },
    { type: 'ReportUpdated', data: { title: 'Curie', text: 'Other.', topic: 'physics', parent_id: null, text_changed: true } },
    { type: 'ReportDeleted', data: {} },
    { type: 'ReportAnnotationRequested', data: { revision: 3 } },
    { type: 'ReportAnnotationStarted', data: { revision: 3 } },
    {
      type: 'ReportAnnotated',
      data: {
        revision: 3,
        model_id: 'local/rule-based-v1',
        similarity_threshold: 0.7,
        max_facts_per_sentence: 5,
        min_sentence_runes: 40,
        sentences: [
          { index: 0, text: 'Marie Curie was the first woman to win a Nobel Prize.', start: 0, end: 53, carried: false, facts: [{ fact_id: 'f-1', score: 0.912345, posture: 'supports' }] },
          { index: 2, text: 'A sentence without facts, long enough to be annotated.', start: 60, end: 114, carried: true, facts: [] },
        ],
      },
    },
    { type: 'ReportAnnotationFailed', data: { revision: 3, reason: 'the provider answered 401' } },
  ];
  for (const [position, event] of events.entries()) {
    const recorded: RecordedEvent = {
      eventId: `00000000-0000-4000-8000-00000000000${position}`,
      streamId: 'report-r-1',
      streamVersion: position,
      globalPosition: position + 1,
      type: event.type,
      schemaVersion: 1,
      repositoryId: 'repo-1',
      actor: 'user-1',
      causationId: null,
      correlationId: 'corr-1',
      occurredAt: '2026-01-02T03:04:05.678Z',
      data: event.data,
    };
    registry.validate(event.type, event.data);
    const encoded = encodeEvent(registry, recorded);
    const decoded = decodeEvent(registry, { key: Buffer.from(encoded.key), value: encoded.value, headers: Object.fromEntries(Object.entries(encoded.headers).map(([name, value]) => [name, Buffer.from(value)])) });
    t.same(decoded.data, event.data, event.type);
  }
  t.throws(() => registry.validate('ReportAnnotated', { ...events[5].data, sentences: [{ index: 0, text: 'x', start: 0, end: 1, carried: false, facts: [{ fact_id: 'f', score: 1, posture: 'agrees' }] }] }), 'an unknown posture is refused');
});
