import type { Knex } from 'knex';
import { projection, each } from '../src/projection/types.js';
import type { ReportEvent } from '../src/domain/report/decider.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

const reportIdOf = (streamId: string): string => parseStreamName(streamId).id;

/** Removes a report's annotated sentences and their facts. */
async function clearAnnotations(trx: Knex.Transaction, reportId: string): Promise<void> {
  await trx('report_annotations').where({ report_id: reportId }).delete();
  await trx('report_sentences').where({ report_id: reportId }).delete();
}

/**
 * Read models `reports`, `report_sentences`, `report_annotations`: every live report with its
 * status, and the facts of its annotated sentences. A deleted report loses its rows; a retracted
 * fact (its last source deleted) leaves every annotation, and the reports' fact counts follow.
 * `fact_count` counts the ids as annotated; the reads answer the facts the annotations show
 * (src/read/reports.ts, liveFactCounts), which follows merges this projection does not see.
 */
export const reportsProjection = projection<ReportEvent | Extract<FactEvent, { type: 'FactRetracted' }>>({
  name: 'reports',
  tables: ['reports', 'report_sentences', 'report_annotations'],
  handlers: {
    ReportCreated: each(async (trx, event) => {
      await trx('reports')
        .insert({
          id: reportIdOf(event.streamId),
          repository_id: event.repositoryId,
          title: event.data.title,
          text: event.data.text,
          topic: event.data.topic,
          parent_id: event.data.parent_id,
          origin: event.data.origin,
          filename: event.data.filename,
          status: 'pending',
          revision: 1,
          created_by: event.actor,
          created_at: event.occurredAt,
          updated_at: event.occurredAt,
        })
        .onConflict('id')
        .ignore();
    }),
    ReportUpdated: each(async (trx, event) => {
      const fields = { title: event.data.title, text: event.data.text, topic: event.data.topic, parent_id: event.data.parent_id, updated_at: event.occurredAt };
      const query = trx('reports').where({ id: reportIdOf(event.streamId) });
      await (event.data.text_changed
        ? query.update({ ...fields, status: 'pending', failure: null, revision: trx.raw('revision + 1') })
        : query.update(fields));
    }),
    ReportDeleted: each(async (trx, event) => {
      const id = reportIdOf(event.streamId);
      await clearAnnotations(trx, id);
      await trx('reports').where({ id }).delete();
    }),
    ReportAnnotationRequested: each(async (trx, event) => {
      await trx('reports')
        .where({ id: reportIdOf(event.streamId) })
        .update({ status: 'pending', failure: null, revision: event.data.revision, updated_at: event.occurredAt });
    }),
    ReportAnnotationStarted: each(async (trx, event) => {
      await trx('reports').where({ id: reportIdOf(event.streamId) }).update({ status: 'processing', updated_at: event.occurredAt });
    }),
    ReportAnnotated: each(async (trx, event) => {
      const id = reportIdOf(event.streamId);
      await clearAnnotations(trx, id);
      const { sentences } = event.data;
      if (sentences.length > 0) {
        await trx('report_sentences').insert(
          sentences.map((sentence) => ({
            report_id: id,
            sentence_index: sentence.index,
            repository_id: event.repositoryId,
            text: sentence.text,
            start_offset: sentence.start,
            end_offset: sentence.end,
            carried: sentence.carried,
          })),
        );
      }
      const annotations = sentences.flatMap((sentence) =>
        sentence.facts.map((fact, rank) => ({
          report_id: id,
          sentence_index: sentence.index,
          fact_id: fact.fact_id,
          repository_id: event.repositoryId,
          rank,
          score: fact.score,
          posture: fact.posture,
        })),
      );
      if (annotations.length > 0) await trx('report_annotations').insert(annotations);
      await trx('reports')
        .where({ id })
        .update({
          status: 'annotated',
          failure: null,
          sentence_count: sentences.length,
          fact_count: new Set(annotations.map((annotation) => annotation.fact_id)).size,
          model_id: event.data.model_id,
          annotated_revision: event.data.revision,
          annotated_at: event.occurredAt,
          updated_at: event.occurredAt,
        });
    }),
    FactRetracted: each(async (trx, event) => {
      const factId = parseStreamName(event.streamId).id;
      const reportIds = (await trx('report_annotations').where({ fact_id: factId }).distinct().pluck('report_id')) as string[];
      if (reportIds.length === 0) return;
      await trx('report_annotations').where({ fact_id: factId }).delete();
      await trx('reports')
        .whereIn('id', reportIds)
        .update({ fact_count: trx.raw('(SELECT count(DISTINCT fact_id) FROM report_annotations WHERE report_annotations.report_id = reports.id)') });
    }),
    ReportAnnotationFailed: each(async (trx, event) => {
      await trx('reports')
        .where({ id: reportIdOf(event.streamId) })
        .update({ status: 'failed', failure: `annotate_report: ${event.data.reason}`, updated_at: event.occurredAt });
    }),
  },
});
