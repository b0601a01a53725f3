import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { groupOf, groups, repositoryFiles, unitTestFiles } from '../group.js';

const root = path.resolve(import.meta.dirname, '../..');
const tapConfig = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).tap as { include: string[] };

t.test('make test runs every test file once: the unit files in their groups, the server and end-to-end files alone', async (t) => {
  const every = repositoryFiles('test/**/*.test.ts');
  // What `npx tap` (and so `make test`) starts: the files package.json's include globs match.
  const started = tapConfig.include.flatMap((pattern) => repositoryFiles(pattern));
  const entries = started.filter((file) => file.startsWith('test/groups/'));
  t.same(entries.map((file) => path.basename(file, '.ts')).sort(), Object.keys(groups).sort(), 'tap starts every group, through its entry');
  const alone = started.filter((file) => !file.startsWith('test/groups/'));
  const grouped = unitTestFiles();
  t.same(alone.filter((file) => grouped.includes(file)), [], 'no file runs both alone and in a group');
  t.same(every.filter((file) => !grouped.includes(file) && !alone.includes(file)), [], 'no test file is left out');
  t.ok(alone.length > 0 && alone.every((file) => file.startsWith('test/e2e/') || file.endsWith('.server.test.ts')), 'alone: the server and end-to-end files');
  t.ok(grouped.includes('test/helpers/groupSelection.test.ts'), 'this file itself runs in a group');
  t.equal(groupOf('test/api/routes/sources.delete.test.ts'), 'api-routes-2', 'the longest matching prefix names the group');
  t.equal(groupOf('test/newfolder/x.test.ts'), 'other', 'a file under no listed prefix runs in other');
});
