import { AjvCompiler } from '@fastify/ajv-compiler';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { FastifySchemaCompiler, FastifySerializerCompiler, FastifyServerOptions } from 'fastify';
import type { FastifyValidationResult } from 'fastify/types/schema.js';

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type RouteValidatorCompiler = FastifySchemaCompiler<unknown>;
type RouteSerializerCompiler = FastifySerializerCompiler<unknown>;
/** One route's schema and what it is for (method, URL, part or status, content type). */
type RouteSchema = Parameters<RouteValidatorCompiler>[0];
/** A compilers factory as fastify calls it: the app's shared schemas and options in, a compiler of one route's schema out. */
type Factory<Compiler> = (externalSchemas: unknown, options: unknown) => Compiler;

/**
 * Route schemas compiled once per process, not once per app. fastify's default compilers make
 * a new Ajv and compile every route's validators and response serializers (fast-json-stringify)
 * for each app it builds: about half of the API thread's work in starting one. A process that
 * builds several apps (the test suite starts a service per file, several per file at times)
 * compiled the same schemas again each time (docs/testing.md, "What a test file pays for").
 *
 * A compiled function depends only on the schema, the part or status it is for and the
 * compiler's options, so it is kept under those, as JSON (the schemas are data; a schema that
 * differs between apps, say by a configured limit, is a different key). Validators come from one
 * process-wide pool of Ajv instances (one per set of options), as fastify's compiler pools them
 * within one app. No route schema has an `$id`, which an Ajv instance would hold once.
 */
// The packages' declarations describe an older call shape (a bare schema); at run time their
// factories take and return what fastify passes, which FastifySchemaCompiler describes.
const validatorPool = AjvCompiler() as unknown as Factory<RouteValidatorCompiler>;
const serializerFactory = SerializerSelector() as unknown as Factory<RouteSerializerCompiler>;

/**
 * `factory` with what its compilers compile kept for the process, under the app's shared schemas
 * and options and the route's parts that `partsOf` names (the schema among them).
 */
function remembering<Compiled>(factory: Factory<(route: RouteSchema) => Compiled>, partsOf: (route: RouteSchema) => unknown[]): Factory<(route: RouteSchema) => Compiled> {
  const compiled = new Map<string, Compiled>();
  return (externalSchemas, options) => {
    const compile = factory(externalSchemas, options);
    const compilerKey = JSON.stringify([externalSchemas, options]);
    return (route) => {
      const key = JSON.stringify([compilerKey, ...partsOf(route)]);
      let result = compiled.get(key);
      if (result === undefined) {
        result = compile(route);
        compiled.set(key, result);
      }
      return result;
    };
  };
}

/** What fastify passes a validator factory: its `ajv` option (the Ajv options and plugins). */
type ValidatorOptions = { customOptions: Record<string, unknown> };

/**
 * Validators by part. A body is JSON, whose types are the sender's: validated as sent, so
 * `{"name": true}` is refused where a string is wanted instead of becoming "true" (and `null` is
 * not ""). Query strings, path parameters and headers are text: coerced to the schema's types, as
 * the app's Ajv options say (`?limit=5` a number, one value a one-element array).
 */
const validatorByPart: Factory<RouteValidatorCompiler> = (externalSchemas, options) => {
  const textParts = validatorPool(externalSchemas, options);
  const given = options as ValidatorOptions;
  const bodies = validatorPool(externalSchemas, { ...given, customOptions: { ...given.customOptions, coerceTypes: false } });
  return (route) => (route.httpPart === 'body' ? bodies(route) : decimalNumbersOnly(route, textParts(route)));
};

const DECIMAL = { integer: /^-?[0-9]+$/, number: /^-?[0-9]+(\.[0-9]+)?$/ } as const;
type NumericType = keyof typeof DECIMAL;

/** The numeric type a property schema takes (directly or as the items of a list), if any. */
function numericTypeOf(property: unknown): NumericType | undefined {
  if (typeof property !== 'object' || property === null) return undefined;
  const { type, items } = property as { type?: unknown; items?: unknown };
  const types = Array.isArray(type) ? type : [type];
  if (types.includes('integer')) return 'integer';
  if (types.includes('number')) return 'number';
  return types.includes('array') ? numericTypeOf(items) : undefined;
}

/**
 * A text part's numbers in plain decimal. Ajv's coercion reads a string as JavaScript's `+x`
 * does, so `?limit=1e2`, `0x10`, `Infinity` and a blank `" "` (0) passed as numbers: a caller's
 * mistake answered as if meant. Each value of a numeric property is checked before coercion.
 */
function decimalNumbersOnly(route: RouteSchema, validate: FastifyValidationResult): FastifyValidationResult {
  const properties = (route.schema as { properties?: Record<string, unknown> }).properties ?? {};
  const numeric = Object.entries(properties).flatMap(([name, property]) => {
    const type = numericTypeOf(property);
    return type ? [[name, type] as const] : [];
  });
  if (numeric.length === 0) return validate;
  // fastify hands Ajv's context (the parent in which to coerce a root value) to a validator with a `schemaEnv`.
  const ajvValidate = validate as FastifyValidationResult & ((data: unknown, context?: unknown) => ReturnType<FastifyValidationResult>) & { schemaEnv?: unknown };
  const checked: FastifyValidationResult & { schemaEnv?: unknown } = (data: unknown, context?: unknown) => {
    if (typeof data === 'object' && data !== null) {
      for (const [name, type] of numeric) {
        const given = (data as Record<string, unknown>)[name];
        const values = Array.isArray(given) ? given : [given];
        if (values.some((value) => typeof value === 'string' && !DECIMAL[type].test(value))) {
          return { error: new Error(`${route.httpPart}/${name} must be ${type === 'integer' ? 'an integer' : 'a number'} in decimal digits`) };
        }
      }
    }
    const valid = ajvValidate(data, context);
    checked.errors = ajvValidate.errors;
    return valid;
  };
  checked.schemaEnv = ajvValidate.schemaEnv;
  return checked;
}

const buildValidator = remembering(validatorByPart, (route) => [route.httpPart, route.schema]);
const buildSerializer = remembering(serializerFactory, (route) => [route.httpStatus, route.contentType, route.schema]);

/** fastify's `schemaController.compilersFactory`: its own compilers, their results kept for the process. */
// fastify's option is typed with the packages' declarations (above), so it takes these as they do.
export const processWideSchemaCompilers = { buildValidator, buildSerializer } as unknown as CompilersFactory;
