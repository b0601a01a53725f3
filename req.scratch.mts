import { openDatabase } from './src/db/database.ts';
import { inBackground } from './src/db/priority.ts';
import { rawQuery } from './src/db/rawQuery.ts';
const db = await openDatabase({ kind: 'pglite', dataDir: 'memory://', autovacuumIntervalMs: false });
for (let round = 0; round < 3; round++) {
  const order: string[] = [];
  const background = inBackground(() => Promise.all(Array.from({ length: 20 }, (_, i) => rawQuery(db.knex, 'SELECT pg_sleep(0.001)').then(() => order.push(`b${i}`)))));
  await new Promise((r) => setTimeout(r, 1));
  const request = (async () => {
    await db.knex.raw('SELECT 1'); order.push('r1');
    await db.knex('pg_class').select('oid').limit(1); order.push('r2');
    await rawQuery(db.knex, 'SELECT 3'); order.push('r3');
    await db.knex.transaction(async (trx) => { await trx.raw('select 4'); }); order.push('r4');
    await db.knex.raw('SELECT 5'); order.push('r5');
  })();
  await Promise.all([background, request]);
  console.log(order.join(' '));
}
await db.close();
