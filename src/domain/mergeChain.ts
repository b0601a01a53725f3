/**
 * Merge chains: a merged fact or concept points at its survivor, which may itself have been
 * merged since. This is the one walk along such chains: over the read models (src/read/facts.ts,
 * src/read/concepts.ts), inside the projections' transactions (projections/mergeChains.ts) and
 * over the pipeline's aggregates (finalConcept, StreamCache.finals) alike. (Two projection
 * statements also follow fact redirects inside their SQL, as a recursive CTE bounded by
 * MAX_MERGE_CHAIN: projections/mergeChains.ts, finalSurvivorSql.)
 */

/** Merge chains are short; a longer one means a cycle. */
export const MAX_MERGE_CHAIN = 64;

/**
 * Follows the chains of `starts` together: each step asks `survivorsOf` once for every chain
 * still walking (the nodes in the order given; its answer in the same order, null where a node
 * has no survivor), so a batch of chains costs one lookup per step along the longest. A chain
 * is walked at most `maxSteps` steps: its `ended` is false when it was cut there, and the caller
 * decides whether that is an error. The answers come in the order of `starts`.
 */
export async function followMergeChains<Node>(
  starts: readonly Node[],
  survivorsOf: (nodes: readonly Node[]) => Promise<ReadonlyArray<Node | null>>,
  maxSteps = MAX_MERGE_CHAIN,
): Promise<Array<{ node: Node; ended: boolean }>> {
  const chains = starts.map((node) => ({ node, ended: false }));
  let walking = chains;
  for (let step = 0; step < maxSteps && walking.length > 0; step += 1) {
    const survivors = await survivorsOf(walking.map((chain) => chain.node));
    const next: typeof walking = [];
    walking.forEach((chain, index) => {
      const survivor = survivors[index] ?? null;
      if (survivor === null) chain.ended = true;
      else {
        chain.node = survivor;
        next.push(chain);
      }
    });
    walking = next;
  }
  return chains;
}

/** followMergeChains for one chain: `survivorOf` gives a node's survivor, or null where the chain ends. */
export async function followMergeChain<Node>(
  start: Node,
  survivorOf: (node: Node) => Promise<Node | null>,
  maxSteps = MAX_MERGE_CHAIN,
): Promise<{ node: Node; ended: boolean }> {
  const [chain] = await followMergeChains([start], async ([node]) => [await survivorOf(node)], maxSteps);
  return chain;
}
