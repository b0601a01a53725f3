import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import avro from 'avsc';
import { InvalidEventError } from './port.js';
import { isPlainObject } from '../util/objects.js';

/** Namespace every event record schema must declare (DESIGN.md, "Events"). */
const eventNamespace = 'factlog.events';

/**
 * The Avro schemas of the `data` payload of every event type, validated before append.
 *
 * Payloads are stored as JSON, so validation works on the JSON form of an Avro value:
 * unions are unwrapped (`null` or the branch's plain value), `long` must be a safe integer,
 * and `bytes`/`fixed` are base64 strings (JSON has no bytes). A field missing from the payload
 * takes the schema's default (so an optional `["null", ...]` field becomes null); a field the
 * schema does not declare is an error, because analysts read the log through these schemas
 * and an undeclared field would be invisible to them.
 */
export class EventSchemaRegistry {
  private readonly types = new Map<string, avro.Type>();

  /**
   * Loads every `*.avsc` of `directory` (default: the project's `schemas/events`).
   * Each file holds one record schema whose name is the event type and the file's base name.
   */
  static async load(directory: string = defaultSchemaDirectory()): Promise<EventSchemaRegistry> {
    const registry = new EventSchemaRegistry();
    const files = (await readdir(directory)).filter((file) => file.endsWith('.avsc')).sort();
    for (const file of files) {
      const text = await readFile(path.join(directory, file), 'utf8');
      let schema: unknown;
      try {
        schema = JSON.parse(text);
      } catch (error) {
        throw new Error(`${file}: not JSON: ${(error as Error).message}`);
      }
      const expectedType = path.basename(file, '.avsc');
      const type = registry.register(expectedType, schema, file);
      if (type.name !== `${eventNamespace}.${expectedType}`) {
        throw new Error(`${file}: record must be named ${eventNamespace}.${expectedType}, is ${String(type.name)}`);
      }
    }
    return registry;
  }

  /**
   * Adds (or replaces) the schema of one event type. `schema` is the parsed `.avsc` document
   * or its JSON text. Returns the compiled Avro type.
   */
  register(eventType: string, schema: unknown, origin = eventType): avro.Type {
    const document: unknown = typeof schema === 'string' ? JSON.parse(schema) : schema;
    if (!isPlainObject(document) || document.type !== 'record') {
      throw new Error(`${origin}: an event schema must be an Avro record`);
    }
    const name = typeof document.name === 'string' ? document.name : '';
    const shortName = name.includes('.') ? name.slice(name.lastIndexOf('.') + 1) : name;
    if (shortName !== eventType) {
      throw new Error(`${origin}: record name ${JSON.stringify(name)} must equal the event type ${eventType}`);
    }
    const namespace = name.includes('.') ? name.slice(0, name.lastIndexOf('.')) : document.namespace;
    if (namespace !== eventNamespace) {
      throw new Error(`${origin}: record namespace must be ${eventNamespace}, is ${JSON.stringify(namespace)}`);
    }
    // avsc's schema typing is a loose union of object shapes; the document was checked to be a record above.
    const type = avro.Type.forSchema(document as avro.Schema);
    this.types.set(eventType, type);
    return type;
  }

  has(eventType: string): boolean {
    return this.types.has(eventType);
  }

  /** Event types with a schema, sorted. */
  eventTypes(): string[] {
    return [...this.types.keys()].sort();
  }

  /** The compiled Avro type of an event type (for the Kafka wire format and exports). */
  typeFor(eventType: string): avro.Type {
    const type = this.types.get(eventType);
    if (!type) throw new InvalidEventError(eventType, 'no schema is registered for this event type');
    return type;
  }

  /** SHA-256 (hex) of the schema's canonical form: identifies the exact schema a payload was written with. */
  fingerprint(eventType: string): string {
    return this.typeFor(eventType).fingerprint('sha256').toString('hex');
  }

  /**
   * Checks `data` against the type's schema and returns it normalised (missing fields filled
   * with their defaults). Throws InvalidEventError naming the failing field path.
   */
  validate(eventType: string, data: unknown): Record<string, unknown> {
    const type = this.typeFor(eventType);
    const result = check(type, data, '');
    if (!result.ok) throw new InvalidEventError(eventType, result.error);
    return result.value as Record<string, unknown>;
  }
}

type CheckResult = { ok: true; value: unknown } | { ok: false; error: string };

const int32Min = -2147483648;
const int32Max = 2147483647;
const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function check(type: avro.Type, value: unknown, at: string): CheckResult {
  const where = at === '' ? '(root)' : at;
  const fail = (expected: string): CheckResult => ({
    ok: false,
    error: `${where}: expected ${expected}, got ${describe(value)}`,
  });
  if (avro.Type.isType(type, 'logical')) {
    return check((type as avro.types.LogicalType).underlyingType, value, at);
  }
  switch (type.typeName) {
    case 'null':
      return value === null ? { ok: true, value } : fail('null');
    case 'boolean':
      return typeof value === 'boolean' ? { ok: true, value } : fail('boolean');
    case 'int':
      return typeof value === 'number' && Number.isInteger(value) && value >= int32Min && value <= int32Max
        ? { ok: true, value }
        : fail('int (32-bit integer)');
    case 'long':
      return typeof value === 'number' && Number.isSafeInteger(value) ? { ok: true, value } : fail('long (safe integer)');
    case 'float':
    case 'double':
      return typeof value === 'number' && Number.isFinite(value) ? { ok: true, value } : fail(`${type.typeName} (finite number)`);
    case 'string':
      return typeof value === 'string' ? { ok: true, value } : fail('string');
    case 'bytes':
      return typeof value === 'string' && base64Pattern.test(value) ? { ok: true, value } : fail('bytes (base64 string)');
    case 'fixed': {
      const size = (type as avro.types.FixedType).size;
      return typeof value === 'string' && base64Pattern.test(value) && Buffer.from(value, 'base64').length === size
        ? { ok: true, value }
        : fail(`fixed of ${size} bytes (base64 string)`);
    }
    case 'enum': {
      const symbols = (type as avro.types.EnumType).symbols;
      return typeof value === 'string' && symbols.includes(value) ? { ok: true, value } : fail(`one of ${symbols.join('|')}`);
    }
    case 'array': {
      if (!Array.isArray(value)) return fail('array');
      const itemsType = arrayItemsType(type);
      const items: unknown[] = [];
      for (let index = 0; index < value.length; index += 1) {
        const item = check(itemsType, value[index], `${at}[${index}]`);
        if (!item.ok) return item;
        items.push(item.value);
      }
      return { ok: true, value: items };
    }
    case 'map': {
      if (!isPlainObject(value)) return fail('map (object)');
      const valuesType = mapValuesType(type);
      const entries: Record<string, unknown> = {};
      for (const [key, entry] of Object.entries(value)) {
        const checked = check(valuesType, entry, `${at}[${JSON.stringify(key)}]`);
        if (!checked.ok) return checked;
        entries[key] = checked.value;
      }
      return { ok: true, value: entries };
    }
    case 'record':
    case 'error': {
      if (!isPlainObject(value)) return fail(`record ${String(type.name)}`);
      const fields = (type as avro.types.RecordType).fields;
      const declared = new Set(fields.map((field) => field.name));
      const unknown = Object.keys(value).find((key) => !declared.has(key) && value[key] !== undefined);
      if (unknown !== undefined) {
        return { ok: false, error: `${joinPath(at, unknown)}: field is not in the schema of ${String(type.name)}` };
      }
      const record: Record<string, unknown> = {};
      for (const field of fields) {
        const fieldPath = joinPath(at, field.name);
        let fieldValue = value[field.name];
        if (fieldValue === undefined) {
          const fallback: unknown = field.defaultValue();
          if (fallback === undefined) return { ok: false, error: `${fieldPath}: required field is missing` };
          fieldValue = fallback;
        }
        const checked = check(field.type, fieldValue, fieldPath);
        if (!checked.ok) return checked;
        record[field.name] = checked.value;
      }
      return { ok: true, value: record };
    }
    case 'union:unwrapped':
    case 'union:wrapped': {
      const branches = (type as avro.types.UnwrappedUnionType).types;
      const errors: string[] = [];
      for (const branch of branches) {
        const checked = check(branch, value, at);
        if (checked.ok) return checked;
        errors.push(checked.error);
      }
      // With one non-null branch (the optional-field case) its error names the nested field that failed.
      const nonNullIndexes = branches.flatMap((branch, index) => (branch.typeName === 'null' ? [] : [index]));
      if (nonNullIndexes.length === 1 && value !== null) return { ok: false, error: errors[nonNullIndexes[0]] };
      const names = branches.map((branch) => branch.name ?? branch.typeName).join(' | ');
      return { ok: false, error: `${where}: expected one of ${names}, got ${describe(value)}` };
    }
    default:
      return { ok: false, error: `${where}: unsupported Avro type ${type.typeName}` };
  }
}

function joinPath(at: string, field: string): string {
  return at === '' ? field : `${at}.${field}`;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'string') return `string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'number') return `number ${value}`;
  return typeof value;
}


/** `schemas/events` of the project: found by walking up from this file (works from src/ and dist/). */
function defaultSchemaDirectory(): string {
  let directory = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(directory, 'schemas', 'events');
    if (existsSync(candidate)) return candidate;
    const parent = path.dirname(directory);
    if (parent === directory) return path.resolve('schemas', 'events');
    directory = parent;
  }
}

/** The type of an Avro array type's items (avsc types `ArrayType.itemsType` loosely; every array type has one). */
export function arrayItemsType(type: avro.Type): avro.Type {
  return (type as unknown as { itemsType: avro.Type }).itemsType;
}

/** The type of an Avro map type's values. */
export function mapValuesType(type: avro.Type): avro.Type {
  return (type as avro.types.MapType).valuesType as avro.Type;
}
