import { runGroup } from '../group.js';

await runGroup(import.meta.filename);
