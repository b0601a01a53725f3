import { withoutCitationsSql } from '../domain/concept/summaries.js';
import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { invalid, notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { websearchQueryText } from '../search/port.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { citationsByLiveFact, liveFacts } from './facts.js';
import { countOf, pageOf, type PageInput } from './paging.js';
import { runeLength } from '../util/codePoints.js';

export const reportStatuses = ['pending', 'processing', 'annotated', 'failed'] as const;
export type ReportStatus = (typeof reportStatuses)[number];

/** Longest `query` of a report search, in characters. */
export const MAX_REPORT_QUERY_CHARS = 1000;

export interface ReportInput {
  repository: string;
  report: string;
}

export interface ReportListInput extends PageInput {
  repository: string;
  /** websearch syntax over title and text. */
  query?: string;
  status?: ReportStatus;
}

export type ReportRow = {
  id: string;
  repository_id: string;
  title: string;
  text: string;
  topic: string | null;
  parent_id: string | null;
  origin: string;
  filename: string | null;
  status: string;
  revision: number;
  /** The revision the last annotation is of; null before the first (or from before migration 025, changed since). */
  annotated_revision: number | null;
  failure: string | null;
  sentence_count: number;
  fact_count: number;
  model_id: string | null;
  created_by: string;
  created_at: Date | string;
  updated_at: Date | string;
  annotated_at: Date | string | null;
};

/**
 * The expression the `reports_search` index is built on (migration 027 builds it from this):
 * queries must use it as is. The text without its fact citations' targets (withoutCitationsSql):
 * PostgreSQL's parser read a bare `(fact:ID)` as words, so `fact` or a piece of an id matched
 * every report that cited one.
 */
export const REPORT_SEARCH_VECTOR = `to_tsvector('english', title || ' ' || ${withoutCitationsSql('text')})`;
const SEARCH_VECTOR = REPORT_SEARCH_VECTOR;

/** A live report of the repository, or `not_found`. */
export async function loadReport(knex: Knex, repositoryId: string, reportId: string): Promise<ReportRow> {
  const row: ReportRow | undefined = await knex('reports').where({ id: reportId, repository_id: repositoryId }).first();
  if (!row) throw notFound('report');
  return row;
}

/** Ids of the report's children, oldest first. */
export async function childIdsOf(knex: Knex, repositoryId: string, reportId: string): Promise<string[]> {
  return (await knex('reports').where({ repository_id: repositoryId, parent_id: reportId }).orderBy([{ column: 'created_at' }, { column: 'id' }]).pluck('id')) as string[];
}

/**
 * How many facts each report's annotations show (by report id; 0 for one without annotations):
 * its cited facts read as the annotations read them (liveFacts), each live fact once. The count
 * the projection keeps is of the ids as annotated, which a merge since (two cited facts that are
 * one now) or a retraction of a cited fact's survivor leaves too high; a cited fact whose every
 * source was deleted (unsourced) is no longer shown, and counts nothing. Cited facts still live are
 * counted in SQL; only the others (merged, retracted or removed since: few) are followed, so a
 * list of long reports does not read every cited fact.
 */
async function liveFactCounts(knex: Knex, repositoryId: string, reportIds: readonly string[]): Promise<Map<string, number>> {
  const counts = new Map(reportIds.map((id) => [id, 0]));
  if (reportIds.length === 0) return counts;
  const ids = [...counts.keys()];
  const live = (await knex.raw(
    `SELECT a.report_id, count(DISTINCT a.fact_id)::integer AS n FROM report_annotations a
       JOIN facts f ON f.id = a.fact_id AND f.repository_id = ? AND f.status <> 'merged' AND NOT f.unsourced
      WHERE a.report_id = ANY(?::text[]) GROUP BY a.report_id`,
    [repositoryId, ids],
  )) as { rows: Array<{ report_id: string; n: number }> };
  for (const row of live.rows) counts.set(row.report_id, Number(row.n));
  const stale = (await knex.raw(
    `SELECT DISTINCT a.report_id, a.fact_id FROM report_annotations a
       LEFT JOIN facts f ON f.id = a.fact_id AND f.repository_id = ?
      WHERE a.report_id = ANY(?::text[]) AND (f.id IS NULL OR f.status = 'merged')`,
    [repositoryId, ids],
  )) as { rows: Array<{ report_id: string; fact_id: string }> };
  if (stale.rows.length === 0) return counts;
  const survivors = await liveFacts(knex, repositoryId, stale.rows.map((row) => row.fact_id));
  if (survivors.size === 0) return counts;
  // A survivor the report also cites by its own id is counted already.
  const citedDirectly: Array<{ report_id: string; fact_id: string }> = await knex('report_annotations')
    .whereIn('report_id', ids)
    .whereIn('fact_id', [...new Set([...survivors.values()].map((fact) => fact.id))])
    .distinct('report_id', 'fact_id');
  const counted = new Set(citedDirectly.map((row) => `${row.report_id} ${row.fact_id}`));
  for (const reportId of ids) {
    const led = citationsByLiveFact(stale.rows.filter((row) => row.report_id === reportId), (row) => row.fact_id, survivors);
    const added = led.filter(({ fact }) => !counted.has(`${reportId} ${fact.id}`)).length;
    counts.set(reportId, (counts.get(reportId) ?? 0) + added);
  }
  return counts;
}

/**
 * A report as answered: every field but the text in lists (`withText` false), with its children's
 * ids and `factCount`, the facts its annotations show (liveFactCounts).
 */
function presentReport(row: ReportRow, childrenIds: string[], factCount: number, withText = true) {
  const { text, ...rest } = row;
  return {
    ...rest,
    ...(withText ? { text } : {}),
    text_chars: text.length,
    children_ids: childrenIds,
    revision: Number(row.revision),
    annotated_revision: row.annotated_revision === null ? null : Number(row.annotated_revision),
    sentence_count: Number(row.sentence_count),
    fact_count: factCount,
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
    annotated_at: isoTimestampOrNull(row.annotated_at),
  };
}

/** One report as answered, with its children and the facts its annotations show. */
export async function answeredReport(knex: Knex, repositoryId: string, row: ReportRow) {
  const factCounts = await liveFactCounts(knex, repositoryId, [row.id]);
  return presentReport(row, await childIdsOf(knex, repositoryId, row.id), factCounts.get(row.id) ?? 0);
}

/** Report queries: list and search, one report, its annotations (src/app/reports.ts writes). */
export function reportQueries(deps: Pick<AppContext, 'db'>) {
  const knex = deps.db.knex;
  const queries = {
    /** Newest first; with `query`, best match first (full text over title and text). Lists leave the text out. */
    async list(principal: Principal, input: ReportListInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:read');
      const page = pageOf(input);
      const text = input.query?.trim() ?? '';
      const searched = websearchQueryText(text);
      // In code points, as the REST schema's maxLength and the MCP tool count (an emoji is one).
      if (runeLength(text) > MAX_REPORT_QUERY_CHARS) throw invalid(`query must be at most ${MAX_REPORT_QUERY_CHARS} characters`);
      const query = knex('reports').where({ repository_id: repository.id });
      if (input.status) query.where({ status: input.status });
      if (text !== '') query.whereRaw(`${SEARCH_VECTOR} @@ websearch_to_tsquery('english', ?)`, [searched]);
      const total = await countOf(query);
      if (text !== '') query.orderByRaw(`ts_rank_cd(${SEARCH_VECTOR}, websearch_to_tsquery('english', ?)) DESC`, [searched]);
      const rows: ReportRow[] = await query.orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }]).limit(page.limit).offset(page.offset).select('*');
      const children = new Map<string, string[]>();
      if (rows.length > 0) {
        const links: Array<{ id: string; parent_id: string }> = await knex('reports')
          .where({ repository_id: repository.id })
          .whereIn('parent_id', rows.map((row) => row.id))
          .orderBy([{ column: 'created_at' }, { column: 'id' }])
          .select('id', 'parent_id');
        for (const link of links) children.set(link.parent_id, [...(children.get(link.parent_id) ?? []), link.id]);
      }
      const factCounts = await liveFactCounts(knex, repository.id, rows.map((row) => row.id));
      return { items: rows.map((row) => presentReport(row, children.get(row.id) ?? [], factCounts.get(row.id) ?? 0, false)), total, query: text };
    },

    async get(principal: Principal, input: ReportInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:read');
      return answeredReport(knex, repository.id, await loadReport(knex, repository.id, input.report));
    },

    /**
     * The annotated sentences of the report's last annotation, in text order, each with its facts
     * best first (`score`, `posture`, and the fact's content). The annotation is kept as made, so
     * its fact ids are read as every read of this service reads one (liveFacts): a fact merged
     * since is shown as its survivor, once per sentence with the best score of the citations that
     * lead to it and the cited ids that merged into it (`merged_from`); one retracted or removed
     * since is left out.
     * All of them (a report is at most 256 KiB: a few thousand sentences), or the page `limit`
     * and `offset` ask for.
     */
    async annotations(principal: Principal, input: ReportInput & { limit?: number; offset?: number }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:read');
      const report = await loadReport(knex, repository.id, input.report);
      const sentences: Array<{ sentence_index: number; text: string; start_offset: number; end_offset: number; carried: boolean }> = await knex('report_sentences')
        .where({ report_id: report.id })
        .orderBy('sentence_index');
      const offset = input.offset ?? 0;
      const page = sentences.slice(offset, input.limit === undefined ? undefined : offset + input.limit);
      // Only the page's annotations: the merge walk reads each merged fact's chain.
      const cited: Array<{ sentence_index: number; fact_id: string; score: number; posture: string }> = page.length === 0 ? [] : await knex('report_annotations')
        .where({ report_id: report.id })
        .whereBetween('sentence_index', [page[0].sentence_index, page[page.length - 1].sentence_index])
        .orderBy([{ column: 'sentence_index' }, { column: 'rank' }])
        .select('sentence_index', 'fact_id', 'score', 'posture');
      const live = await liveFacts(knex, repository.id, cited.map((annotation) => annotation.fact_id));
      const bySentence = new Map<number, typeof cited>();
      for (const annotation of cited) {
        const list = bySentence.get(annotation.sentence_index) ?? [];
        list.push(annotation);
        bySentence.set(annotation.sentence_index, list);
      }
      /** Per sentence, each live fact the cited ids lead to, once, with its best citation's score and posture, best first. */
      const factsOf = (index: number) =>
        citationsByLiveFact(bySentence.get(index) ?? [], (annotation) => annotation.fact_id, live)
          .map(({ fact, mergedFrom, citations }) => {
            // The first of the best: a survivor may rank higher than its first citation did.
            const best = citations.reduce((kept, next) => (Number(next.score) > Number(kept.score) ? next : kept));
            return { fact_id: fact.id, content: String(fact.content), score: Number(best.score), posture: best.posture, status: String(fact.status), merged_from: mergedFrom };
          })
          .sort((a, b) => b.score - a.score);
      return {
        report_id: report.id,
        status: report.status,
        revision: Number(report.revision),
        // The revision the items annotate: their offsets point into that revision's text.
        annotated_revision: report.annotated_revision === null ? null : Number(report.annotated_revision),
        annotated_at: isoTimestampOrNull(report.annotated_at),
        items: page.map((sentence) => ({
          index: sentence.sentence_index,
          text: sentence.text,
          start: sentence.start_offset,
          end: sentence.end_offset,
          carried: sentence.carried,
          facts: factsOf(sentence.sentence_index),
        })),
        total: sentences.length,
      };
    },
  };

  return {
    ...queries,

    /** The report with its annotations, all of them, in one answer (MCP's getReport): what `GET .../reports/{id}` and `GET .../annotations` answer apart. */
    async withAnnotations(principal: Principal, input: ReportInput) {
      return { ...(await queries.get(principal, input)), annotations: await queries.annotations(principal, input) };
    },
  };
}
