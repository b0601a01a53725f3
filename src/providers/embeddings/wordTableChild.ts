/**
 * Child process entry (run by `loadWordTable` in src/providers/embeddings/local.ts when the
 * binary cache is missing or damaged): converts the package's word vectors into the cache file
 * named by its argument and exits. The conversion scans a 307 MB JSON file and holds the table
 * twice to write it; in this process all of that goes away when it ends.
 */
import { writeConvertedCache } from './local.js';
import { errorMessage } from '../../util/errorMessage.js';

const [cachePath] = process.argv.slice(2);
if (!cachePath) {
  console.error('wordTableChild: run by loadWordTable (src/providers/embeddings/local.ts) with the cache file to write');
  process.exit(2);
}
try {
  writeConvertedCache(cachePath);
} catch (error) {
  // One line: the parent's error quotes this process's last lines.
  console.error(`wordTableChild: ${errorMessage(error)}`);
  process.exit(1);
}
