import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import t from 'tap';
import { createAppContext } from '../../../src/app/context.js';
import { buildConfig } from '../../../src/config/load.js';
import { ConfigError } from '../../../src/config/types.js';
import { TEST_SECRET } from '../../helpers/service.js';

t.test('profile production refuses to start without oauth.issuer, before opening anything', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-oauth-issuer-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const config = buildConfig({ profile: 'production', storage: { data_dir: dataDir }, auth: { jwt_secret: TEST_SECRET }, bootstrap: { auto_promote_first_user: false } });
  t.equal(config.oauth.issuer, '');
  const refusal = await createAppContext(config, { logger: pino({ level: 'silent' }), env: {} }).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(refusal instanceof ConfigError, 'a ConfigError');
  t.match((refusal as Error).message, /oauth\.issuer: must be set in production/);
  t.same(await readdir(dataDir), [], 'no database was created');
});
