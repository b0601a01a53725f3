/**
 * The chat-model phases whose system prompt a repository may override (`SetPrompts`,
 * `RepositoryPromptsChanged`). The built-in texts live in src/providers/llm/promptsets.ts.
 */
export const PROMPT_PHASES = [
  'fact_extraction',
  'image_fact_extraction',
  'concept_extraction',
  'refinement',
  'synthesis',
  'summarization',
  'posture',
  'image_picker',
] as const;

export type PromptPhase = (typeof PROMPT_PHASES)[number];

/** Longest prompt override accepted, in characters (UTF-16 code units). */
export const MAX_PROMPT_CHARS = 20_000;

export function isPromptPhase(value: string): value is PromptPhase {
  return (PROMPT_PHASES as readonly string[]).includes(value);
}
