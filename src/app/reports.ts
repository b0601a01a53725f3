import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Principal } from '../auth/rbac.js';
import { withNamedLock, withNamedLocks } from '../db/namedLock.js';
import { rawQuery } from '../db/rawQuery.js';
import { MAX_REPORT_BYTES, MAX_REPORT_TITLE_CHARS, ReportTooLargeError, reportDecider, type ReportCommand } from '../domain/report/decider.js';
import { plainText } from '../domain/report/sentences.js';
import { oneLine, shortenRunes, unsafeTextReason } from '../domain/text.js';
import { streamName } from '../eventstore/envelope.js';
import { answeredReport, childIdsOf, loadReport, type ReportInput } from '../read/reports.js';
import { authorizeRepository, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { invalid, notFound } from './errors.js';
import { uploadedMediaType, type UploadedContent, type UploadKinds } from './sources.js';
import { headOfUnits } from '../util/codePoints.js';

/** The UTF-8 byte-order mark an uploaded report may start with; it is not kept. */
const UTF8_BOM_BYTES = 3;

/** Deepest chain of parents followed when checking a new parent (a longer one is refused). */
export const MAX_REPORT_DEPTH = 100;

export interface ReportFields {
  title?: string;
  text?: string;
  topic?: string | null;
  parent_id?: string | null;
}

/** The reports to make children of a report (replacing its children), with its fields or alone. */
export interface ReportChildren {
  children_ids?: readonly string[];
}

const REPORT_UPLOAD_TYPES: Record<string, string> = { '.md': 'text/markdown', '.markdown': 'text/markdown', '.txt': 'text/plain', '.text': 'text/plain' };
const ACCEPTED_REPORT_TYPES = new Set(['text/markdown', 'text/x-markdown', 'text/plain']);

const REPORT_UPLOADS: UploadKinds = { noun: 'report', accepted: ACCEPTED_REPORT_TYPES, byExtension: REPORT_UPLOAD_TYPES, advice: 'upload Markdown (.md) or plain text (.txt)' };

/** A report upload's type: Markdown or plain text, by its declared type or else its extension. */
export function reportUploadType(content: Pick<UploadedContent, 'filename' | 'declaredType'>): string {
  return uploadedMediaType(content, REPORT_UPLOADS).mediaType;
}

/** The first line with words, as a title, when none is given. */
export function defaultTitle(text: string, filename: string | null = null): string {
  const line = text.split('\n').map(plainText).find((candidate) => candidate !== '');
  const title = line ?? (filename ? filename.replace(/\.[a-z0-9]+$/i, '') : '') ?? '';
  return shortenRunes(oneLine(title).trim(), 120) || 'Untitled report';
}

/**
 * The parent and its ancestors, parent first, as the read model has them; refuses a parent that
 * is not a report of the repository. A chain that comes back on itself stops there (the decider
 * refuses it when it contains the report being edited).
 */
async function parentChain(knex: Knex, repositoryId: string, parentId: string): Promise<string[]> {
  // One statement, not one a level: on the embedded tier each statement queues anew for the
  // database's one connection. At most MAX_REPORT_DEPTH + 1 rows, which also ends a cycle.
  const { rows } = await rawQuery<{ id: string }>(
    knex,
    `WITH RECURSIVE chain (id, parent_id, depth) AS (
       SELECT id, parent_id, 1 FROM reports WHERE id = ? AND repository_id = ?
       UNION ALL
       SELECT r.id, r.parent_id, chain.depth + 1 FROM reports r JOIN chain ON r.id = chain.parent_id
        WHERE r.repository_id = ? AND chain.depth <= ?
     )
     SELECT id FROM chain ORDER BY depth`,
    [parentId, repositoryId, repositoryId, MAX_REPORT_DEPTH],
  );
  if (rows.length === 0) throw invalid(`parent report ${parentId} not found in this repository`);
  const chain: string[] = [];
  // An ancestor deleted meanwhile ends the chain (the join finds no row); a cycle ends where it comes back.
  for (const { id } of rows) {
    if (chain.includes(id)) break;
    chain.push(id);
  }
  if (chain.length > MAX_REPORT_DEPTH) throw invalid(`reports nest at most ${MAX_REPORT_DEPTH} deep`);
  return chain;
}

/**
 * How many levels of children hang below the report (0 for none), counted as far as
 * MAX_REPORT_DEPTH + 1: one statement, as parentChain is, and bounded, which also ends a cycle.
 */
async function levelsBelow(knex: Knex, repositoryId: string, reportId: string): Promise<number> {
  const { rows } = await rawQuery<{ levels: number }>(
    knex,
    `WITH RECURSIVE below (id, depth) AS (
       SELECT id, 1 FROM reports WHERE parent_id = ? AND repository_id = ?
       UNION ALL
       SELECT r.id, below.depth + 1 FROM reports r JOIN below ON r.parent_id = below.id
        WHERE r.repository_id = ? AND below.depth <= ?
     )
     SELECT coalesce(max(depth), 0)::int AS levels FROM below`,
    [reportId, repositoryId, repositoryId, MAX_REPORT_DEPTH],
  );
  return Number(rows[0]?.levels ?? 0);
}

/**
 * Refuses, before anything is written, reports that cannot become children of the report whose
 * chain (itself first, then its parents) is `chain`: one not in the repository (400, as an
 * unknown parent is: a body field is wrong), the report or one of its parents (a cycle), and one
 * whose reports below would then nest deeper than MAX_REPORT_DEPTH (the check a move under a
 * parent makes).
 */
async function checkNewChildren(knex: Knex, repositoryId: string, chain: readonly string[], children: readonly string[]): Promise<void> {
  for (const child of children) {
    if (child === chain[0]) throw invalid('a report cannot be its own child');
    if (chain.includes(child)) throw invalid(`report ${child} cannot be a child: it is a parent of this report (a cycle)`);
    const found: { id: string } | undefined = await knex('reports').where({ id: child, repository_id: repositoryId }).first('id');
    if (!found) throw invalid(`child report ${child} not found in this repository`);
    if (chain.length + (await levelsBelow(knex, repositoryId, child)) > MAX_REPORT_DEPTH) {
      throw invalid(`reports nest at most ${MAX_REPORT_DEPTH} deep: report ${child} and the reports below it would reach deeper`);
    }
  }
}

/** What the holders of a report's lock and of the report tree's decide on (NamedLockRequest.readModels). */
const REPORT_READ_MODELS = ['reports'];

/** Report commands: create (typed or uploaded), edit, delete, and ask for a new annotation. */
export function reportCommands(deps: Pick<AppContext, 'db' | 'commands'>) {
  const knex = deps.db.knex;

  const reportLock = (reportId: string) => `factlog.report.${reportId}`;
  const treeLock = (repositoryId: string) => `factlog.report-tree.${repositoryId}`;

  /**
   * A command on one report and the read its answer comes from, one at a time with the report's
   * deletion (across processes on a server): a deletion that landed between an edit's write and
   * that read made the edit answer 404 although it was stored. Now the deletion comes first (the
   * edit is refused, nothing stored) or after the edit's answer. The deletion holds the report's
   * lock and the tree's, so a command made under the tree's lock (`treeHeld`) takes no other: a
   * third lock nested on a server would hold a third pooled connection.
   */
  function execute(repositoryId: string, reportId: string, command: ReportCommand, principal: Principal, trace?: Trace, treeHeld = false) {
    const work = async () => {
      await deps.commands.execute(streamName('report', reportId), reportDecider, command, commandMetadata(principal, repositoryId, trace));
      return answeredReport(knex, repositoryId, await loadReport(knex, repositoryId, reportId));
    };
    return treeHeld ? work() : withNamedLock(deps.db, reportLock(reportId), work, 'exclusive', REPORT_READ_MODELS);
  }

  /**
   * Parent changes of one repository, one at a time on every node: each checks the chain it
   * extends and appends before the next reads the chains, so two concurrent edits (A under B, B
   * under A) cannot close a cycle that each alone would not.
   */
  const inReportTree = <T>(repositoryId: string, work: () => Promise<T>) => withNamedLock(deps.db, treeLock(repositoryId), work, 'exclusive', REPORT_READ_MODELS);

  /**
   * Makes `wanted` the children of the report whose chain (itself first) is `chain`. The caller
   * has checked `wanted` (checkNewChildren) before its first write, so a refused list moves none.
   */
  async function replaceChildren(repositoryId: string, chain: readonly string[], wanted: readonly string[], principal: Principal, trace?: Trace) {
    const reportId = chain[0] as string;
    const current = await childIdsOf(knex, repositoryId, reportId);
    for (const child of wanted.filter((id) => !current.includes(id))) {
      await execute(repositoryId, child, { type: 'UpdateReport', reportId: child, parentId: reportId, parentChain: chain }, principal, trace, true);
    }
    for (const child of current.filter((id) => !wanted.includes(id))) {
      await execute(repositoryId, child, { type: 'UpdateReport', reportId: child, parentId: null, parentChain: [] }, principal, trace, true);
    }
  }

  async function create(
    principal: Principal,
    repositoryId: string,
    fields: ReportFields & ReportChildren & { text: string },
    origin: 'text' | 'upload',
    filename: string | null,
    trace?: Trace,
  ) {
    const reportId = randomUUID();
    // Looked for from the first line with a character, in a span a title cannot outgrow, never cut inside a character.
    const title = fields.title ?? defaultTitle(headOfUnits(fields.text.trimStart(), 4 * MAX_REPORT_TITLE_CHARS), filename);
    const run = (treeHeld: boolean) =>
      execute(
        repositoryId,
        reportId,
        { type: 'CreateReport', reportId, title, text: fields.text, topic: fields.topic ?? null, parentId: fields.parent_id ?? null, origin, filename },
        principal,
        trace,
        treeHeld,
      );
    const parentId = fields.parent_id;
    const children = fields.children_ids === undefined ? undefined : [...new Set(fields.children_ids)];
    if (!parentId && children === undefined) return run(false);
    return inReportTree(repositoryId, async () => {
      const chain = [reportId, ...(parentId ? await parentChain(knex, repositoryId, parentId) : [])];
      if (children === undefined) return run(true);
      // The children are checked before the report is made: a refused list leaves no report behind.
      await checkNewChildren(knex, repositoryId, chain, children);
      await run(true);
      await replaceChildren(repositoryId, chain, children, principal, trace);
      return answeredReport(knex, repositoryId, await loadReport(knex, repositoryId, reportId));
    });
  }

  return {
    async create(principal: Principal, input: ReportFields & ReportChildren & { repository: string; text: string }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:create');
      // Children taken are reports changed: as setChildren, that needs reports:write too.
      if (input.children_ids !== undefined) await authorizeRepository(knex, principal, input.repository, 'reports:write');
      return create(principal, repository.id, input, 'text', null, trace);
    },

    /**
     * A Markdown or plain-text file as a report. `content` is read only once the caller may
     * create reports. The limit is on the text as stored (without a byte-order mark, line ends
     * normalised), as for a typed text: only a body that cannot shrink to it (CRLF to LF at most
     * halves it) is refused before it is decoded.
     */
    async upload(principal: Principal, input: Omit<ReportFields, 'text'> & { repository: string; content: () => Promise<UploadedContent> }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:create');
      const { filename, declaredType, body } = await input.content();
      if (body.length > 2 * MAX_REPORT_BYTES + UTF8_BOM_BYTES) throw new ReportTooLargeError(body.length);
      reportUploadType({ filename, declaredType });
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(body).replace(/^\uFEFF/, '');
      } catch {
        throw invalid('the uploaded report is not UTF-8 text');
      }
      const unsafe = unsafeTextReason(text);
      if (unsafe) throw invalid(`the uploaded report ${unsafe}`);
      return create(principal, repository.id, { ...input, text }, 'upload', filename, trace);
    },

    /**
     * Changes any of title, text, topic, parent and children; a text change re-annotates the
     * sentences that changed. Every check is made before the first write.
     */
    async update(principal: Principal, input: ReportInput & ReportFields & ReportChildren, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:write');
      const stored = await loadReport(knex, repository.id, input.report);
      const children = input.children_ids === undefined ? undefined : [...new Set(input.children_ids)];
      const treeHeld = Boolean(input.parent_id) || children !== undefined;
      const run = async () => {
        const chain = input.parent_id ? await parentChain(knex, repository.id, input.parent_id) : [];
        // Moved under a parent, the report takes its children along: the deepest of them must stay within the limit too.
        if (chain.length > 0 && chain.length + (await levelsBelow(knex, repository.id, input.report)) > MAX_REPORT_DEPTH) {
          throw invalid(`reports nest at most ${MAX_REPORT_DEPTH} deep: this report and the reports below it would reach deeper`);
        }
        const command: ReportCommand = { type: 'UpdateReport', reportId: input.report, title: input.title, text: input.text, topic: input.topic, parentId: input.parent_id, parentChain: chain };
        if (children === undefined) return execute(repository.id, input.report, command, principal, trace, treeHeld);
        // The report's chain as the edit leaves it: under its new parent, or where it stands.
        const chainAfter = input.parent_id === undefined ? await parentChain(knex, repository.id, stored.id) : [input.report, ...chain];
        await checkNewChildren(knex, repository.id, chainAfter, children);
        await execute(repository.id, input.report, command, principal, trace, true);
        await replaceChildren(repository.id, chainAfter, children, principal, trace);
        return answeredReport(knex, repository.id, await loadReport(knex, repository.id, input.report));
      };
      return treeHeld ? inReportTree(repository.id, run) : run();
    },

    /**
     * Deletes a report without children (409 when it has some). Counted and deleted as one step
     * of the report tree, so a child made under it meanwhile is either counted or refused.
     */
    async delete(principal: Principal, input: ReportInput, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:delete');
      await loadReport(knex, repository.id, input.report);
      // The tree's lock (children counted) and the report's (no command on it between its write and its answer), on one connection.
      const locks = [treeLock(repository.id), reportLock(input.report)].map((name) => ({ name, mode: 'exclusive' as const, readModels: REPORT_READ_MODELS }));
      await withNamedLocks(deps.db, locks, async () => {
        const children = await childIdsOf(knex, repository.id, input.report);
        const { write } = await deps.commands.execute(
          streamName('report', input.report),
          reportDecider,
          { type: 'DeleteReport', childCount: children.length },
          commandMetadata(principal, repository.id, trace),
        );
        // Nothing appended: a deletion sent beside this one deleted it since it was loaded, and a deleted report is not found.
        if (write === null) throw notFound('report');
      });
    },

    /** Queues a new annotation of every sentence; poll `GET .../tasks?report_id=` or the report's status. */
    async annotate(principal: Principal, input: ReportInput, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:write');
      await loadReport(knex, repository.id, input.report);
      return execute(repository.id, input.report, { type: 'RequestAnnotation' }, principal, trace);
    },

    /**
     * Makes `children_ids` the report's children: each listed report gets it as parent (the same
     * cycle and depth checks as a parent change, all made before the first is moved), each former
     * child not listed loses its parent.
     */
    async setChildren(principal: Principal, input: ReportInput & { children_ids: readonly string[] }, trace?: Trace) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'reports:write');
      await loadReport(knex, repository.id, input.report);
      // Answered inside the tree's lock, which a deletion takes: after it, the report could be gone.
      return inReportTree(repository.id, async () => {
        const chain = await parentChain(knex, repository.id, input.report);
        const wanted = [...new Set(input.children_ids)];
        await checkNewChildren(knex, repository.id, chain, wanted);
        await replaceChildren(repository.id, chain, wanted, principal, trace);
        return answeredReport(knex, repository.id, await loadReport(knex, repository.id, input.report));
      });
    },
  };
}
