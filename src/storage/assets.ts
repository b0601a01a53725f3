import { createHash } from 'node:crypto';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, writeFile, access } from 'node:fs/promises';
import path from 'node:path';

/**
 * Content-addressed blob store on the filesystem (`<data_dir>/assets`): bodies, extracted text
 * and Markdown, images. A blob's name is its SHA-256, so writing the same bytes twice is a no-op
 * and events can refer to blobs by hash without ever embedding them.
 */
export interface AssetStore {
  /**
   * Stores the bytes under their SHA-256. `sha256`: their digest (hex) when the caller computed it
   * of these very bytes already (a keyed upload's, src/api/uploads.ts), so they are not hashed
   * twice; it is not checked, and a wrong one would store the bytes under another blob's name.
   */
  put(bytes: Uint8Array | string, sha256?: string): Promise<{ sha256: string; bytes: number }>;
  get(sha256: string): Promise<Buffer>;
  getText(sha256: string): Promise<string>;
  has(sha256: string): Promise<boolean>;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

export function createFileAssetStore(root: string): AssetStore {
  const pathOf = (sha256: string) => {
    if (!SHA256_HEX.test(sha256)) throw new Error(`not a SHA-256 hex digest: ${sha256}`);
    return path.join(root, sha256.slice(0, 2), sha256.slice(2, 4), sha256);
  };
  return {
    async put(content, known) {
      const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content);
      const sha256 = known ?? createHash('sha256').update(bytes).digest('hex');
      const target = pathOf(sha256);
      try {
        await access(target);
      } catch {
        await mkdir(path.dirname(target), { recursive: true });
        // Write then rename so a crash never leaves a truncated blob under its final name.
        // A random part, not the clock: two puts of the same bytes in one millisecond must not share it.
        const temporary = `${target}.${process.pid}.${randomUUID()}.tmp`;
        await writeFile(temporary, bytes);
        await rename(temporary, target);
      }
      return { sha256, bytes: bytes.length };
    },
    get: (sha256) => readFile(pathOf(sha256)),
    async getText(sha256) {
      return (await readFile(pathOf(sha256))).toString('utf8');
    },
    async has(sha256) {
      try {
        await access(pathOf(sha256));
        return true;
      } catch {
        return false;
      }
    },
  };
}
