import { checkConstraintSize } from './constraint-limits.js';
import { InvalidRequestError } from '../errors.js';
import type { TextTokenizer } from '../../tokenizer/tokenizer.js';
import { bytesToByteLevel } from '../../tokenizer/byte-level.js';
import { checkJsonSchema, checkPattern, rewriteForXgrammar } from './json-schema-support.js';
import { ConstraintMatcher, type GrammarMatcher } from './matcher.js';
import { constraintKey, type Constrained, type ConstraintSpec } from './spec.js';
import { GrammarSyntaxError, XgrammarRuntime, type GrammarSource } from './xgrammar/runtime.js';
import type { XgCompiledGrammar } from './xgrammar/xgrammar-glue.js';

/** A request's compiled constraint: what each of its sequences builds a matcher from. */
export interface CompiledConstraint {
  readonly key: string;
  /** A fresh matcher at the grammar's start; `stopTokenIds` are the request's (empty: end when complete). */
  matcher(stopTokenIds: readonly number[]): GrammarMatcher;
}

/** A constraint as the compiler gives it: its matchers are xgrammar's own (they also roll back). */
export interface CompiledGrammar extends CompiledConstraint {
  matcher(stopTokenIds: readonly number[]): ConstraintMatcher;
}

/** Grammar compilation counters, for /metrics and the bench. */
export interface GrammarStats {
  compiles: number;
  compileSecondsTotal: number;
  cacheHits: number;
  cached: number;
  /** Building xgrammar's tokenizer info (once per engine), seconds; 0 until the first constraint. */
  initSeconds: number;
  /** Compile times as a cumulative histogram (Prometheus' shape): counts[i] compiles took <= buckets[i] s. */
  compileSeconds: { buckets: number[]; counts: number[]; sum: number; count: number };
}

const COMPILE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

const CACHE_ENTRIES = 64;
const now = (): number => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/**
 * Compiles constraints for one engine's tokenizer, caching compiled grammars by spec (LRU, CACHE_ENTRIES),
 * so the per-(schema, tokenizer) cost is paid once. xgrammar starts on the first constrained request.
 * Everything is synchronous: the request is checked and compiled before it is queued, and a bad schema
 * or regex is a 400 like any other bad parameter.
 */
export class ConstraintCompiler {
  private runtime: XgrammarRuntime | undefined;
  private readonly cache = new Map<string, XgCompiledGrammar>();
  readonly stats: GrammarStats = {
    compiles: 0,
    compileSecondsTotal: 0,
    cacheHits: 0,
    cached: 0,
    initSeconds: 0,
    compileSeconds: { buckets: COMPILE_BUCKETS, counts: COMPILE_BUCKETS.map(() => 0), sum: 0, count: 0 },
  };

  constructor(
    /** xgrammar's compiled WebAssembly module, from the host; undefined = structured outputs unavailable. */
    private readonly module: WebAssembly.Module | undefined,
    private readonly tokenizer: TextTokenizer,
    private readonly vocabSize: number,
    private readonly eosTokenIds: readonly number[],
    /** Whether JSON constraints leave whitespace free when a request does not say (server default: no). */
    private readonly anyWhitespace = false,
  ) {}

  /** A copy of the counters (safe to send over RPC). */
  snapshot(): GrammarStats {
    const h = this.stats.compileSeconds;
    return { ...this.stats, compileSeconds: { ...h, buckets: [...h.buckets], counts: [...h.counts] } };
  }

  get available(): boolean {
    return this.module !== undefined;
  }

  compile({ spec: asked, param }: Constrained): CompiledGrammar {
    if (!this.module)
      throw new InvalidRequestError(
        param,
        'structured outputs are not available on this runtime',
        'unsupported_parameter',
      );
    checkConstraintSize(asked, param);
    const spec = withWhitespace(asked, this.anyWhitespace);
    const key = constraintKey(spec);
    let compiled = this.cache.get(key);
    if (compiled) {
      this.stats.cacheHits++;
      this.cache.delete(key); // re-inserted below: most recently used last
    } else {
      const runtime = this.ensureRuntime();
      const started = now();
      try {
        compiled = runtime.compile(toSource(spec, param, runtime));
      } catch (err) {
        if (err instanceof GrammarSyntaxError)
          throw new InvalidRequestError(param, `${param}: ${err.message || 'the grammar could not be parsed'}`);
        throw err;
      }
      if (!admitsAnything(runtime, compiled)) {
        compiled.delete();
        throw new InvalidRequestError(
          param,
          `${param}: no text satisfies this grammar (its language is empty, e.g. a rule or $ref that only refers to itself)`,
          'empty_grammar',
        );
      }
      const seconds = (now() - started) / 1000;
      this.stats.compiles++;
      this.stats.compileSecondsTotal += seconds;
      const h = this.stats.compileSeconds;
      h.sum += seconds;
      h.count++;
      for (const [i, le] of h.buckets.entries()) if (seconds <= le) h.counts[i]++;
    }
    this.cache.set(key, compiled);
    while (this.cache.size > CACHE_ENTRIES) {
      const [oldest, grammar] = this.cache.entries().next().value as [string, XgCompiledGrammar];
      this.cache.delete(oldest);
      grammar.delete(); // matchers built from it hold their own reference
    }
    this.stats.cached = this.cache.size;
    const runtime = this.runtime!;
    const grammar = compiled;
    return { key, matcher: (stops) => new ConstraintMatcher(runtime, grammar, stops) };
  }

  private ensureRuntime(): XgrammarRuntime {
    if (this.runtime) return this.runtime;
    const started = now();
    this.runtime = new XgrammarRuntime(
      this.module!,
      grammarVocab(this.tokenizer, this.vocabSize),
      this.vocabSize,
      this.eosTokenIds,
    );
    this.stats.initSeconds = (now() - started) / 1000;
    return this.runtime;
  }
}

/**
 * Whether a generation can even begin under `compiled`: some token is allowed first, or the grammar is
 * complete before any. A grammar that allows nothing at its start (`{"$ref":"#"}`, `root ::= root`)
 * would fail every sequence that used it, so it is refused when compiled. A grammar that dead-ends later
 * (a rule reached after some text that never ends) fails only its own sequence (Engine.step).
 */
function admitsAnything(runtime: XgrammarRuntime, compiled: XgCompiledGrammar): boolean {
  const matcher = new ConstraintMatcher(runtime, compiled, []);
  try {
    return matcher.terminated || matcher.nextMask().some((word) => word !== 0);
  } finally {
    matcher.dispose();
  }
}

/**
 * The vocabulary as xgrammar reads it: every token's bytes in GPT-2's byte-level spelling (so one vocab
 * type serves byte-level and SentencePiece tokenizers alike), and '' for added and special tokens, which
 * a grammar must never produce as text (their text is not what the detokenizer shows).
 */
export function grammarVocab(tokenizer: TextTokenizer, vocabSize: number): string[] {
  const vocab = new Array<string>(vocabSize);
  for (let id = 0; id < vocabSize; id++) {
    if (tokenizer.isAddedToken(id) || tokenizer.isSpecial(id)) {
      vocab[id] = '';
      continue;
    }
    try {
      vocab[id] = bytesToByteLevel(tokenizer.tokenBytes(id));
    } catch {
      vocab[id] = ''; // a hole in the vocabulary
    }
  }
  return vocab;
}

/** The spec with its JSON whitespace decided (the request's choice, else the server's), so the cache key says it. */
function withWhitespace(spec: ConstraintSpec, anyByDefault: boolean): ConstraintSpec {
  if (spec.type !== 'json_object' && spec.type !== 'json_schema' && spec.type !== 'tool_calls') return spec;
  return { ...spec, anyWhitespace: spec.anyWhitespace ?? anyByDefault };
}

function toSource(spec: ConstraintSpec, param: string, runtime: XgrammarRuntime): GrammarSource {
  switch (spec.type) {
    case 'json_object':
      return { kind: 'json_schema', schema: '{"type":"object"}', anyWhitespace: spec.anyWhitespace === true };
    case 'json_schema':
      checkJsonSchema(spec.schema, param);
      return {
        kind: 'json_schema',
        schema: JSON.stringify(rewriteForXgrammar(spec.schema, param)),
        anyWhitespace: spec.anyWhitespace === true,
      };
    case 'regex':
      if (typeof spec.pattern !== 'string' || spec.pattern.length === 0)
        throw new InvalidRequestError(param, `${param} must be a non-empty regular expression`);
      checkPattern(spec.pattern, param);
      return {
        kind: 'structural_tag',
        json: JSON.stringify({ type: 'structural_tag', format: { type: 'regex', pattern: spec.pattern } }),
      };
    case 'choice':
      if (
        !Array.isArray(spec.choices) ||
        spec.choices.length === 0 ||
        !spec.choices.every((c) => typeof c === 'string' && c.length > 0)
      ) {
        throw new InvalidRequestError(param, `${param} must be a non-empty array of non-empty strings`);
      }
      return {
        kind: 'structural_tag',
        json: JSON.stringify({
          type: 'structural_tag',
          format: { type: 'or', elements: spec.choices.map((value) => ({ type: 'const_string', value })) },
        }),
      };
    case 'grammar':
      if (typeof spec.ebnf !== 'string' || spec.ebnf.trim().length === 0)
        throw new InvalidRequestError(param, `${param} must be a non-empty EBNF grammar`);
      return { kind: 'ebnf', ebnf: spec.ebnf };
    case 'tool_calls': {
      for (const tag of spec.tags) checkJsonSchema(tag.schema, param);
      const tags = spec.tags.map((t) => {
        const schema = rewriteForXgrammar(t.schema, param);
        const content = spec.anyWhitespace
          ? { type: 'json_schema', json_schema: schema }
          : { type: 'grammar', grammar: runtime.compactJsonEbnf(JSON.stringify(schema)) };
        return { type: 'tag', begin: t.begin, content, end: t.end };
      });
      const format = {
        type: 'tags_with_separator',
        tags,
        separator: '\n',
        at_least_one: true,
        stop_after_first: !spec.parallel,
      };
      return { kind: 'structural_tag', json: JSON.stringify({ type: 'structural_tag', format }) };
    }
  }
}
