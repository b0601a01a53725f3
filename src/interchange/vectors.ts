/**
 * Vectors in events are packed float32 (DESIGN.md, "Events"): little-endian IEEE 754 single
 * precision, base64-encoded, so an event carries 4 bytes per dimension as text that JSON and
 * Avro `string` fields hold without loss.
 */
export function packVector(vector: readonly number[]): string {
  const packed = new Float32Array(vector.length);
  for (let i = 0; i < vector.length; i++) {
    const value = vector[i];
    if (typeof value !== 'number' || !Number.isFinite(value)) throw new TypeError(`vector[${i}] is not a finite number`);
    packed[i] = value;
  }
  // Float32Array is host-endian; every platform Node 20 ships for is little-endian, checked below.
  return Buffer.from(packed.buffer, packed.byteOffset, packed.byteLength).toString('base64');
}

export function unpackVector(packed: string): number[] {
  const bytes = Buffer.from(packed, 'base64');
  if (bytes.length % 4 !== 0) throw new TypeError('packed vector length is not a multiple of 4 bytes');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const vector = new Array<number>(bytes.length / 4);
  for (let i = 0; i < vector.length; i++) vector[i] = view.getFloat32(i * 4, true);
  return vector;
}

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) throw new Error('packVector assumes a little-endian host');

/** Cosine similarity of two vectors of equal length; 0 when either is all zeros. */
export function cosineSimilarity(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new RangeError(`vectors differ in length: ${a.length} and ${b.length}`);
  let dot = 0;
  let normA = 0;
  let normB = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    normA += a[i] * a[i];
    normB += b[i] * b[i];
  }
  return normA === 0 || normB === 0 ? 0 : dot / Math.sqrt(normA * normB);
}
