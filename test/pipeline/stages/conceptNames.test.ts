import t from 'tap';
import { conceptNameSuite } from './conceptNameSuite.js';

// PGlite's database has a UTF-8 ctype: lower() maps Σ to σ where conceptNameKey keeps the final ς, and never composes.
t.setTimeout(300_000);
await conceptNameSuite(t);
