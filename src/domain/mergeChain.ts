/**
 * Merge chains: a merged fact or concept points at its survivor, which may itself have been
 * merged since. This is the one walk along such a chain: over the read models (src/read/facts.ts,
 * src/read/concepts.ts) and over the pipeline's aggregates (finalFact, finalConcept) alike.
 */

/** Merge chains are short; a longer one means a cycle. */
export const MAX_MERGE_CHAIN = 64;

/**
 * Follows `survivorOf` from `start` until a node has no survivor (null). `ended` is false when
 * the chain was cut after `maxSteps` steps; the caller decides whether that is an error.
 */
export async function followMergeChain<Node>(
  start: Node,
  survivorOf: (node: Node) => Promise<Node | null>,
  maxSteps = MAX_MERGE_CHAIN,
): Promise<{ node: Node; ended: boolean }> {
  let node = start;
  for (let step = 0; step < maxSteps; step += 1) {
    const next = await survivorOf(node);
    if (next === null) return { node, ended: true };
    node = next;
  }
  return { node, ended: false };
}
