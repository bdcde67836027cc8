import xgrammar, {
  type XgBinding,
  type XgCompiledGrammar,
  type XgGrammar,
  type XgGrammarCompiler,
  type XgGrammarMatcher,
  type XgTokenizerInfo,
} from './xgrammar-glue.js';

/** A grammar xgrammar refused (bad regex, bad EBNF, a schema its converter cannot read): the client's fault. */
export class GrammarSyntaxError extends Error {
  override readonly name = 'GrammarSyntaxError';
}

/** What to build a grammar from, in xgrammar's own terms. */
export type GrammarSource =
  /** anyWhitespace: any run of whitespace between JSON tokens; else one space after `,` and `:`, none elsewhere. */
  | { kind: 'json_schema'; schema: string; anyWhitespace: boolean }
  | { kind: 'structural_tag'; json: string }
  | { kind: 'ebnf'; ebnf: string };

/** JSON's separators when whitespace is not free: `, ` and `: ` (as JSON.stringify(v, null, 1) minus newlines). */
const SPACED = { first: ', ', second: ': ' };
/** No whitespace at all. */
const COMPACT = { first: ',', second: ':' };

/**
 * xgrammar (WebAssembly, vendored from @mlc-ai/web-xgrammar) driven synchronously, for one tokenizer.
 *
 * Two instances of the module: `main` holds the tokenizer info, the compiler and every compiled grammar
 * and matcher; `probe` only parses. xgrammar reports bad input (an unclosed regex group, an EBNF syntax
 * error) by aborting its whole instance, so user input is parsed on the probe first, and only what parsed
 * there reaches `main`. A probe that aborted is replaced (a few milliseconds).
 */
export class XgrammarRuntime {
  private readonly main: XgBinding;
  private readonly info: XgTokenizerInfo;
  private readonly compiler: XgGrammarCompiler;
  private probe: XgBinding | undefined;
  private probeMessages: string[] = [];

  /**
   * @param vocab  byte-level spelling of every id in [0, vocabSize); '' for ids never to be generated
   *               under a grammar (special and added tokens). xgrammar treats '' as special.
   * @param stopTokenIds  the ids that end a generation (a matcher accepts one when the grammar is complete).
   */
  constructor(
    private readonly module: WebAssembly.Module,
    vocab: string[],
    readonly vocabSize: number,
    stopTokenIds: readonly number[],
  ) {
    this.main = xgrammar.instantiateSync(module, (m) => console.warn(`xgrammar: ${m}`));
    const vocabVec = this.main.vecStringFromJSArray(vocab);
    const stops = this.main.vecIntFromJSArray([...stopTokenIds]);
    try {
      this.info = new this.main.TokenizerInfo(vocabVec, 'BYTE_LEVEL', vocabSize, stops, false);
    } finally {
      vocabVec.delete();
      stops.delete();
    }
    this.compiler = new this.main.GrammarCompiler(this.info, 1, true);
  }

  /** Parses on the probe (throws GrammarSyntaxError with xgrammar's reason), then compiles on main. */
  compile(source: GrammarSource): XgCompiledGrammar {
    this.parse(source);
    switch (source.kind) {
      case 'json_schema':
        return this.compiler.CompileJSONSchema(
          source.schema,
          source.anyWhitespace,
          undefined,
          source.anyWhitespace ? undefined : SPACED,
          true,
          undefined,
        );
      case 'structural_tag':
        return this.compiler.CompileStructuralTag(source.json);
      case 'ebnf': {
        const grammar = this.main.Grammar.FromEBNF(source.ebnf, 'root');
        try {
          return this.compiler.CompileGrammar(grammar);
        } finally {
          grammar.delete();
        }
      }
    }
  }

  /**
   * The EBNF of JSON valid against `schema` with no whitespace at all (`{"a":1,"b":[2,3]}`): what a
   * structural tag takes as a `grammar` format, so tool-call arguments are compact JSON. Converted on the
   * probe, so a schema xgrammar cannot read is a GrammarSyntaxError, not an aborted main instance.
   */
  compactJsonEbnf(schema: string): string {
    return this.parse({ kind: 'json_schema', schema, anyWhitespace: false }, COMPACT);
  }

  private parse(source: GrammarSource, separators = SPACED): string {
    this.probe ??= xgrammar.instantiateSync(this.module, (m) => this.probeMessages.push(m));
    this.probeMessages = [];
    let grammar: XgGrammar;
    try {
      if (source.kind === 'json_schema')
        grammar = this.probe.Grammar.FromJSONSchema(
          source.schema,
          source.anyWhitespace,
          undefined,
          source.anyWhitespace ? undefined : separators,
          true,
          undefined,
          false,
        );
      else if (source.kind === 'structural_tag') grammar = this.probe.Grammar.FromStructuralTag(source.json);
      else grammar = this.probe.Grammar.FromEBNF(source.ebnf, 'root');
    } catch (err) {
      this.probe = undefined; // aborted: never used again
      const reason = this.probeMessages
        .map((m) => m.replace(/^\[(FATAL|WARNING)\] [^:]*:\d+: /, '').trim())
        .filter((m) => m && !m.startsWith('Aborted('))
        .join('; ');
      throw new GrammarSyntaxError(reason || (err instanceof Error ? err.message : String(err)));
    }
    try {
      return grammar.ToString();
    } finally {
      grammar.delete();
    }
  }

  /** A matcher for `compiled`. With no stop tokens, it ends as soon as the grammar is complete. */
  matcher(compiled: XgCompiledGrammar, stopTokenIds: readonly number[]): XgGrammarMatcher {
    if (stopTokenIds.length === 0) return new this.main.GrammarMatcher(compiled, undefined, true, -1);
    const stops = this.main.vecIntFromJSArray([...stopTokenIds]);
    try {
      return new this.main.GrammarMatcher(compiled, stops, false, -1);
    } finally {
      stops.delete();
    }
  }

  /** Copies the matcher's next-token bitmask (ceil(vocabSize / 32) words, bit set = allowed) into `out`. */
  fillMask(matcher: XgGrammarMatcher, out: Int32Array): void {
    const vector = matcher.GetNextTokenBitmask(this.vocabSize);
    try {
      out.set(this.main.vecIntToView(vector).subarray(0, out.length));
    } finally {
      vector.delete();
    }
  }
}
