import { existsSync, globSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import ts from 'typescript';

/**
 * The modules of src/ (and what they import from the repository, e.g. projections/) import each
 * other without a cycle: a module of a runtime cycle may run before what it imports is defined,
 * and a cycle of types says two modules each own a part of the other. Only static imports and
 * re-exports count (an `import()` is loaded later, when the modules are defined).
 */

const root = path.resolve(import.meta.dirname, '..');

interface Edge {
  to: string;
  typeOnly: boolean;
}

/** Each module's relative imports, from src/ outwards to every module they reach. */
function importGraph(): Map<string, Edge[]> {
  const graph = new Map<string, Edge[]>();
  const queue = globSync('src/**/*.ts', { cwd: root }).filter((file) => !file.endsWith('.d.ts'));
  for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
    if (graph.has(file)) continue;
    const source = ts.createSourceFile(file, readFileSync(path.join(root, file), 'utf8'), ts.ScriptTarget.Latest);
    const edges: Edge[] = [];
    for (const statement of source.statements) {
      let specifier: ts.Expression | undefined;
      let typeOnly = false;
      if (ts.isImportDeclaration(statement)) {
        specifier = statement.moduleSpecifier;
        const clause = statement.importClause;
        const named = clause?.namedBindings;
        // `import { type A }` loads the module for nothing at run time, as `import type { A }`.
        typeOnly = clause !== undefined && (clause.isTypeOnly || (!clause.name && named !== undefined && ts.isNamedImports(named) && named.elements.length > 0 && named.elements.every((element) => element.isTypeOnly)));
      } else if (ts.isExportDeclaration(statement)) {
        specifier = statement.moduleSpecifier;
        typeOnly = statement.isTypeOnly;
      }
      if (specifier === undefined || !ts.isStringLiteral(specifier) || !specifier.text.startsWith('.')) continue;
      const target = path.join(path.dirname(file), specifier.text.replace(/\.js$/, '.ts'));
      const resolved = [target, target.replace(/\.ts$/, '/index.ts')].find((candidate) => existsSync(path.join(root, candidate)));
      if (resolved === undefined) continue;
      edges.push({ to: resolved.split(path.sep).join('/'), typeOnly });
      queue.push(resolved);
    }
    graph.set(file.split(path.sep).join('/'), edges);
  }
  return graph;
}

/** The groups of modules that import each other, directly or not (Tarjan's strongly connected components), each sorted. */
function cycles(graph: Map<string, Edge[]>, follows: (edge: Edge) => boolean): string[][] {
  const order = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (module: string) => {
    order.set(module, order.size);
    low.set(module, order.get(module) ?? 0);
    stack.push(module);
    onStack.add(module);
    for (const edge of (graph.get(module) ?? []).filter(follows)) {
      if (!order.has(edge.to)) {
        visit(edge.to);
        low.set(module, Math.min(low.get(module) ?? 0, low.get(edge.to) ?? 0));
      } else if (onStack.has(edge.to)) low.set(module, Math.min(low.get(module) ?? 0, order.get(edge.to) ?? 0));
    }
    if (low.get(module) !== order.get(module)) return;
    const group: string[] = [];
    for (let member = stack.pop(); member !== undefined; member = member === module ? undefined : stack.pop()) {
      onStack.delete(member);
      group.push(member);
    }
    if (group.length > 1 || (graph.get(module) ?? []).some((edge) => follows(edge) && edge.to === module)) found.push(group.sort());
  };
  for (const module of graph.keys()) if (!order.has(module)) visit(module);
  return found;
}

t.test('src/ has no import cycle', async (t) => {
  const graph = importGraph();
  t.ok(graph.size > 200, `${graph.size} modules read`);
  t.same(cycles(graph, (edge) => !edge.typeOnly), [], 'none of the imports that load a module');
  // A cycle of types is a type that belongs to the module that owns it: the query modules'
  // `Pick<AppContext, ...>` comes from src/app/appContext.ts, not from the root that builds them.
  t.same(cycles(graph, () => true), [], 'none of types either');
});
