import t from 'tap';
import { openScratchPostgres } from '../../../src/db/database.js';
import { migrateEmbeddedSchema } from '../../helpers/schema.js';
import { conceptNameSuite } from './conceptNameSuite.js';

t.setTimeout(300_000);

for (const locale of ['C', undefined] as const) {
  t.test(`on the PostgreSQL server, in a database with the ${locale ?? 'default'} locale`, async (t) => {
    await conceptNameSuite(t, async () => {
      const db = await openScratchPostgres(undefined, 'factlog_names', { locale });
      const ctype = (await db.knex.raw('SHOW lc_ctype')).rows[0].lc_ctype as string;
      // Many servers run with the C locale, where lower() changes ASCII letters only.
      if (locale === 'C' && ctype !== 'C') throw new Error(`the scratch database has ctype ${ctype}, not C`);
      await migrateEmbeddedSchema(db.knex);
      return db;
    });
  });
}
