import { readFileSync } from 'node:fs';
import t from 'tap';

interface LockEntry {
  version?: string;
  hasInstallScript?: boolean;
}

/** The installed name of a lock file's `node_modules/...` key (the last `node_modules/` segment: nested copies count). */
const packageNameOf = (lockPath: string) => lockPath.slice(lockPath.lastIndexOf('node_modules/') + 'node_modules/'.length);

// npm 11 warns at every install about a dependency's install script that package.json's
// allowScripts does not cover, and npm 12 skips it: each must be decided (docs/operations.md, "Runtime").
t.test("every dependency with an install script is allowed or denied in package.json's allowScripts", async (t) => {
  const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as { allowScripts?: Record<string, boolean> };
  const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, LockEntry> };
  const allowScripts = manifest.allowScripts ?? {};
  const withScripts = Object.entries(lock.packages)
    .filter(([lockPath, entry]) => lockPath !== '' && entry.hasInstallScript)
    .map(([lockPath, entry]) => ({ name: packageNameOf(lockPath), version: entry.version }));
  t.ok(withScripts.length > 0, `${withScripts.length} dependencies have install scripts`);
  const undecided = withScripts.filter(({ name, version }) => !(name in allowScripts) && !(`${name}@${version}` in allowScripts));
  t.same(undecided, [], 'none is left undecided');
  const stale = Object.keys(allowScripts).filter((key) => !withScripts.some(({ name, version }) => key === name || key === `${name}@${version}`));
  t.same(stale, [], 'allowScripts names only dependencies that have install scripts');
  t.equal(allowScripts.usearch, true, "usearch's install script builds its addon where no prebuilt binary loads");
});
