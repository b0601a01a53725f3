/**
 * Events of a report's stream `report-<id>`. A report is a text written by a user (typed or
 * uploaded as Markdown or plain text) whose sentences `annotate_report` links to the facts
 * behind them. Status as the read model shows it: `pending` (waiting for annotation) →
 * `processing` → `annotated` | `failed`; a text change or an annotation request makes it
 * `pending` again.
 *
 * Each text change and each annotation request opens a new `revision`; an annotation records
 * the revision it covers, so one that finishes after the text changed again records nothing.
 */

/** How a fact stands to a sentence: the sentence agrees with it, denies it, or is about the same thing. */
export const POSTURES = ['supports', 'contradicts', 'related'] as const;
export type Posture = (typeof POSTURES)[number];

export type AnnotatedFact = {
  fact_id: string;
  /** Similarity of sentence and fact (cosine of their vectors; word overlap without vectors). */
  score: number;
  posture: Posture;
};

export type AnnotatedSentence = {
  /** Position among all the report's sentences (`splitSentences`). */
  index: number;
  text: string;
  /** UTF-16 offsets in the report's text. */
  start: number;
  end: number;
  /** Best first, at most `max_facts_per_sentence`. */
  facts: AnnotatedFact[];
  /** True when copied from the previous annotation because the sentence's text did not change. */
  carried: boolean;
};

/** The `providers.reports` settings an annotation was made with. */
export type AnnotationSettings = {
  similarity_threshold: number;
  max_facts_per_sentence: number;
  min_sentence_runes: number;
};

export type ReportEvent =
  | {
      type: 'ReportCreated';
      data: { title: string; text: string; topic: string | null; parent_id: string | null; origin: 'text' | 'upload'; filename: string | null };
    }
  /** The full values after the edit; `text_changed` says whether a new annotation is due. */
  | { type: 'ReportUpdated'; data: { title: string; text: string; topic: string | null; parent_id: string | null; text_changed: boolean } }
  | { type: 'ReportDeleted'; data: Record<string, never> }
  /** A user asked for a new annotation of every sentence (`POST .../annotate`). */
  | { type: 'ReportAnnotationRequested'; data: { revision: number } }
  | { type: 'ReportAnnotationStarted'; data: { revision: number } }
  | {
      type: 'ReportAnnotated';
      /** Only sentences of at least `min_sentence_runes` runes are listed (those with no fact too). */
      data: AnnotationSettings & { revision: number; model_id: string; sentences: AnnotatedSentence[] };
    }
  | { type: 'ReportAnnotationFailed'; data: { revision: number; reason: string } };
