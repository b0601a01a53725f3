/** `items` in consecutive slices of at most `size` (the last may be shorter); none for no items. */
export function chunked<T>(items: readonly T[], size: number): T[][] {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`chunk size must be a positive integer, not ${size}`);
  const chunks: T[][] = [];
  for (let start = 0; start < items.length; start += size) chunks.push(items.slice(start, start + size));
  return chunks;
}

/**
 * `items` in consecutive batches of at most `maxBytes` by `sizeOf` and, when given, `maxItems`
 * items; an item larger than `maxBytes` goes alone in its batch. What a request to a server that
 * bounds its size carries (OpenSearch's bulk requests, Kafka's produce requests).
 */
export function chunkedBySize<T>(items: readonly T[], bound: { maxBytes: number; maxItems?: number; sizeOf: (item: T) => number }): T[][] {
  const maxItems = bound.maxItems ?? Infinity;
  const batches: T[][] = [];
  let batch: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = bound.sizeOf(item);
    if (batch.length > 0 && (batch.length >= maxItems || bytes + size > bound.maxBytes)) {
      batches.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(item);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}
