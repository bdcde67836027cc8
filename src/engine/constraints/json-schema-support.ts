import { InvalidRequestError } from '../errors.js';

/**
 * Which JSON Schema keywords a constrained generation enforces. xgrammar's converter silently ignores some
 * keywords (multipleOf, uniqueItems, not, if/then/else, ...) and treats others loosely (oneOf as anyOf),
 * so a schema using them would be "followed" without being met. Those are refused here, by name, before
 * anything is compiled: a client learns at once that we cannot promise them, rather than getting output
 * that fails its own validation. (Measured against xgrammar 0.1.27; see docs/structured-outputs.md.)
 */
const ENFORCED = new Set([
  'type',
  'enum',
  'const',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'prefixItems',
  'minItems',
  'maxItems',
  'minLength',
  'maxLength',
  'pattern',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'anyOf',
  'allOf',
  '$ref',
  '$defs',
  'definitions',
]);

/** Keywords that change nothing a validator checks. */
const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  'deprecated',
  'readOnly',
  'writeOnly',
  '$schema',
  '$id',
  '$comment',
  '$anchor',
  'contentEncoding',
  'contentMediaType',
]);

/** Subschema-holding keywords, by how they hold them. */
const SCHEMA_MAPS = ['properties', '$defs', 'definitions'];
const SCHEMA_LISTS = ['anyOf', 'allOf', 'prefixItems'];
const SCHEMA_ONE = ['items', 'additionalProperties'];

const TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

function refuse(param: string, path: string, message: string): never {
  throw new InvalidRequestError(
    param,
    `${message} (at ${path}); see docs/structured-outputs.md for what is supported`,
    'unsupported_schema_feature',
  );
}

/**
 * Walks a JSON schema and throws InvalidRequestError (code `unsupported_schema_feature`) naming the first
 * keyword we cannot enforce, and its place (a JSON pointer).
 */
export function checkJsonSchema(schema: unknown, param: string, path = '#'): void {
  if (typeof schema === 'boolean') return;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new InvalidRequestError(param, `a JSON schema must be an object or a boolean (at ${path})`);
  }
  const s = schema as Record<string, unknown>;
  for (const [key, value] of Object.entries(s)) {
    if (key.startsWith('x-') || ANNOTATIONS.has(key)) continue;
    if (!ENFORCED.has(key)) refuse(param, path, `the JSON schema keyword '${key}' is not supported`);
    if (key === 'type') {
      const types = Array.isArray(value) ? value : [value];
      for (const t of types)
        if (typeof t !== 'string' || !TYPES.has(t))
          throw new InvalidRequestError(
            param,
            `'type' must name JSON types, got ${JSON.stringify(value)} (at ${path})`,
          );
    }
    if (key === 'allOf' && Array.isArray(value) && value.length > 1)
      refuse(param, path, "the JSON schema keyword 'allOf' is supported with one subschema only");
    if (key === '$ref' && (typeof value !== 'string' || !value.startsWith('#')))
      refuse(param, path, "'$ref' must point inside the schema ('#/...')");
    if (key === 'pattern' && typeof value === 'string') checkPattern(value, param, `${path}/pattern`);
    if ((key === 'enum' && !Array.isArray(value)) || (key === 'required' && !Array.isArray(value))) {
      throw new InvalidRequestError(param, `'${key}' must be an array (at ${path})`);
    }
  }
  for (const key of SCHEMA_MAPS) {
    const map = s[key];
    if (map === undefined) continue;
    if (typeof map !== 'object' || map === null || Array.isArray(map))
      throw new InvalidRequestError(param, `'${key}' must be an object (at ${path})`);
    for (const [name, sub] of Object.entries(map)) checkJsonSchema(sub, param, `${path}/${key}/${escapePointer(name)}`);
  }
  for (const key of SCHEMA_LISTS) {
    const list = s[key];
    if (list === undefined) continue;
    if (!Array.isArray(list)) throw new InvalidRequestError(param, `'${key}' must be an array of schemas (at ${path})`);
    for (const [i, sub] of list.entries()) checkJsonSchema(sub, param, `${path}/${key}/${i}`);
  }
  for (const key of SCHEMA_ONE) if (s[key] !== undefined) checkJsonSchema(s[key], param, `${path}/${key}`);
}

/** Regex features xgrammar's converter does not implement (lookaround, backreferences): refused by name. */
export function checkPattern(pattern: string, param: string, path = 'pattern'): void {
  const unsupported: [RegExp, string][] = [
    [/\(\?[=!]/, 'lookahead'],
    [/\(\?<[=!]/, 'lookbehind'],
    [/\\[1-9]|\\k</, 'backreferences'],
  ];
  for (const [re, what] of unsupported)
    if (re.test(pattern)) refuse(param, path, `regular expressions with ${what} are not supported`);
  try {
    new RegExp(pattern, 'u');
  } catch (err) {
    throw new InvalidRequestError(param, `invalid regular expression at ${path}: ${(err as Error).message}`);
  }
}

function escapePointer(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}

/**
 * Works around xgrammar 0.1.27's length-bounded strings: it builds them from `[^"\\\r\n]`, which lets raw
 * control characters (invalid JSON) and partial UTF-8 (a different character count once decoded) through.
 * A string with minLength / maxLength becomes the equivalent pattern over printable ASCII without `"` and
 * `\`, which xgrammar's regex path enforces exactly. Returns a rewritten copy; the input is not changed.
 */
export function rewriteForXgrammar(schema: unknown, param: string, path = '#'): unknown {
  if (Array.isArray(schema)) return schema.map((s, i) => rewriteForXgrammar(s, param, `${path}/${i}`));
  if (typeof schema !== 'object' || schema === null) return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    // enum / const / default / examples hold values, not schemas.
    out[key] = ['enum', 'const', 'default', 'examples'].includes(key)
      ? value
      : rewriteForXgrammar(value, param, `${path}/${key}`);
  }
  const s = schema as Record<string, unknown>;
  if (s.minLength === undefined && s.maxLength === undefined) return out;
  if (s.pattern !== undefined)
    refuse(
      param,
      path,
      "'minLength' / 'maxLength' together with 'pattern' are not supported; put the length in the pattern",
    );
  const min = typeof s.minLength === 'number' ? s.minLength : 0;
  const max = typeof s.maxLength === 'number' ? String(s.maxLength) : '';
  delete out.minLength;
  delete out.maxLength;
  out.pattern = `^[ !#-\\[\\]-~]{${min},${max}}$`;
  return out;
}
