import { InvalidRequestError } from '../errors.js';
import type { ConstraintSpec } from './spec.js';

/**
 * What a structured output may ask for, checked before anything is compiled: compiling a grammar is synchronous
 * work on the shard's one thread, and its time grows with the grammar's size, so a request's size is what bounds
 * it. Each limit is far above what a real schema, pattern or choice list needs.
 */
export const CONSTRAINT_LIMITS = {
  /** A JSON schema (or all of a tool list's argument schemas), as JSON text. */
  schemaChars: 64 * 1024,
  /** A regular expression. */
  patternChars: 4 * 1024,
  /**
   * Strings of a `choice`, and their characters together. Compile time grows faster than either: in workerd
   * on wordnet-chat's 49k vocabulary, 1,024 choices of 17 characters took 0.7-0.8 s and 16 of 1,000 took 9 s;
   * at these limits the worst shape measured (16 of 256) took 0.5 s.
   */
  choices: 512,
  choiceChars: 4 * 1024,
  /** An EBNF grammar. */
  grammarChars: 64 * 1024,
  /**
   * Characters of the literals a grammar chooses between, where its size does not bound its compile time: a
   * schema's `enum` strings and `pattern`s, an EBNF grammar's quoted strings. An enum of 16 strings of 1,000
   * characters (16 KiB of schema) compiled for 6.9 s, the same as EBNF literals for 7.7 s.
   */
  literalChars: 4 * 1024,
} as const;

/** Characters of a schema's `enum` strings and `pattern`s, at any depth (bodies nest 64 deep at most). */
function schemaLiteralChars(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + schemaLiteralChars(v), 0);
  if (typeof value !== 'object' || value === null) return 0;
  let n = 0;
  for (const [key, v] of Object.entries(value)) {
    if (key === 'enum' && Array.isArray(v))
      n += v.reduce((m: number, e) => m + (typeof e === 'string' ? e.length : 0), 0);
    else if (key === 'pattern' && typeof v === 'string') n += v.length;
    n += schemaLiteralChars(v);
  }
  return n;
}

/** Characters inside an EBNF grammar's quoted strings. */
function grammarLiteralChars(ebnf: string): number {
  let n = 0;
  for (const match of ebnf.matchAll(/"((?:[^"\\]|\\.)*)"/g)) n += match[1].length;
  return n;
}

/** Refuses (400 `constraint_too_large`, naming the limit) a constraint past CONSTRAINT_LIMITS. */
export function checkConstraintSize(spec: ConstraintSpec, param: string): void {
  const L = CONSTRAINT_LIMITS;
  const refuse = (what: string, size: number, limit: number): never => {
    throw new InvalidRequestError(
      param,
      `${param}: ${what} is ${size} long, past the limit of ${limit}; a smaller one compiles in bounded time`,
      'constraint_too_large',
    );
  };
  switch (spec.type) {
    case 'json_schema': {
      const n = JSON.stringify(spec.schema).length;
      if (n > L.schemaChars) refuse('the schema (as JSON)', n, L.schemaChars);
      const literals = schemaLiteralChars(spec.schema);
      if (literals > L.literalChars) refuse("the schema's enum strings and patterns", literals, L.literalChars);
      break;
    }
    case 'tool_calls': {
      const n = spec.tags.reduce((sum, t) => sum + JSON.stringify(t.schema).length + t.begin.length + t.end.length, 0);
      if (n > L.schemaChars) refuse("the tools' schemas (as JSON)", n, L.schemaChars);
      const literals = spec.tags.reduce((sum, t) => sum + schemaLiteralChars(t.schema), 0);
      if (literals > L.literalChars) refuse("the tools' enum strings and patterns", literals, L.literalChars);
      break;
    }
    case 'regex':
      if (spec.pattern.length > L.patternChars) refuse('the pattern', spec.pattern.length, L.patternChars);
      break;
    case 'choice': {
      if (spec.choices.length > L.choices) refuse('the list of choices', spec.choices.length, L.choices);
      const n = spec.choices.reduce((sum, c) => sum + c.length, 0);
      if (n > L.choiceChars) refuse('the choices together', n, L.choiceChars);
      break;
    }
    case 'grammar': {
      if (spec.ebnf.length > L.grammarChars) refuse('the grammar', spec.ebnf.length, L.grammarChars);
      const literals = grammarLiteralChars(spec.ebnf);
      if (literals > L.literalChars) refuse("the grammar's quoted strings", literals, L.literalChars);
      break;
    }
    case 'json_object':
      break;
  }
}
