import { runGroupEntry } from '../groupEntry.js';

await runGroupEntry(import.meta.filename);
