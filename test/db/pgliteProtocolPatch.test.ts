// patches/@electric-sql+pglite+*.patch (applied by `npm ci`'s postinstall, patch-package): PGlite's
// wire-protocol reader decodes each text value from a view of the reply instead of from a copy
// (docs/performance.md, "Sixteenth round"). These tests hold the behaviour and the missing copies.
import { PGlite } from '@electric-sql/pglite';
import t from 'tap';
import { DumpBlob } from '../../src/db/pgliteDump.js';
import { pgliteWasmModules } from '../../src/db/pgliteWasm.js';
import { pgliteStartParams, pgliteTemplate } from '../helpers/pglite.js';

const pglite = await PGlite.create({ dataDir: 'memory://', loadDataDir: new DumpBlob(await pgliteTemplate()), startParams: pgliteStartParams, ...(await pgliteWasmModules()) });
t.teardown(() => pglite.close());

const ROWS = 200;

t.test('text values come back whole: multi-byte characters, empty strings, nulls, column names', async (t) => {
  const result = await pglite.query<{ n: number; 'naïve label': string | null; empty: string; doc: { x: string } }>(
    `SELECT g AS n,
            CASE WHEN g % 7 = 0 THEN NULL ELSE 'Zürich ✓ 東京 ' || g || ' 🦉' END AS "naïve label",
            '' AS empty,
            jsonb_build_object('x', repeat('é', g % 5)) AS doc
       FROM generate_series(1, $1::int) AS g`,
    [ROWS],
  );
  t.equal(result.rows.length, ROWS);
  t.same(result.fields.map((field) => field.name), ['n', 'naïve label', 'empty', 'doc']);
  t.same(
    result.rows,
    Array.from({ length: ROWS }, (_, i) => i + 1).map((n) => ({ n, 'naïve label': n % 7 === 0 ? null : `Zürich ✓ 東京 ${n} 🦉`, empty: '', doc: { x: 'é'.repeat(n % 5) } })),
  );
});

t.test('reading a reply copies no buffer per value', async (t) => {
  // Unpatched, every text value (and every column name) was sliced into an ArrayBuffer of its own before decoding.
  const slice = ArrayBuffer.prototype.slice;
  let slices = 0;
  ArrayBuffer.prototype.slice = function counted(this: ArrayBuffer, ...range: Parameters<ArrayBuffer['slice']>): ArrayBuffer {
    slices++;
    return slice.apply(this, range);
  };
  try {
    const result = await pglite.query<{ a: string; b: string }>(`SELECT 'a' || g AS a, 'b' || g AS b FROM generate_series(1, $1::int) AS g`, [ROWS]);
    t.equal(result.rows.length, ROWS);
    t.equal(result.rows[ROWS - 1].b, `b${ROWS}`);
  } finally {
    ArrayBuffer.prototype.slice = slice;
  }
  t.ok(slices < 20, `${slices} buffer copies for ${ROWS * 2} values`);
});
