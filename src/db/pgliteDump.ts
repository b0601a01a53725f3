/**
 * A PGlite data directory as a tar (`PGlite.dumpDataDir('none')`), for `loadDataDir`: the tests
 * start their databases from such dumps instead of running initdb.
 *
 * PGlite takes a dump as a Blob and reads it with `arrayBuffer()`. Node's Blob copies the bytes in
 * as it is made and reads them back in chunks that it joins again: three copies of a 27 MB dump at
 * each open, and a tenth of a unit test run's CPU. A `DumpBlob` hands PGlite the bytes it holds.
 */
export class DumpBlob extends Blob {
  readonly #bytes: Uint8Array<ArrayBuffer>;

  /** Holds `bytes` (not a copy): PGlite only reads them, untarring copies of the files. */
  constructor(bytes: Uint8Array<ArrayBuffer>) {
    super([]);
    this.#bytes = bytes;
    // Blob's `size` is a getter of its own bytes (none here); TypeScript's lib types it as a property.
    Object.defineProperty(this, 'size', { value: bytes.byteLength });
  }

  override arrayBuffer(): Promise<ArrayBuffer> {
    const { buffer, byteOffset, byteLength } = this.#bytes;
    return Promise.resolve(byteOffset === 0 && byteLength === buffer.byteLength ? buffer : buffer.slice(byteOffset, byteOffset + byteLength));
  }

  override bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return Promise.resolve(this.#bytes);
  }

  override slice(): Blob {
    throw new Error('DumpBlob: a dump is read whole (arrayBuffer)');
  }

  override stream(): ReadableStream<Uint8Array<ArrayBuffer>> {
    throw new Error('DumpBlob: a dump is read whole (arrayBuffer)');
  }

  override text(): Promise<string> {
    throw new Error('DumpBlob: a dump is read whole (arrayBuffer)');
  }
}
