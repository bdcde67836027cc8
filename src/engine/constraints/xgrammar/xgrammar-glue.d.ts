// Types for the vendored glue (scripts/xgrammar-vendor.ts): only the embind surface the engine drives.

/** A C++ object held by JS: freed by delete(), never by the garbage collector. */
export interface XgHandle {
  delete(): void;
}
export interface XgVectorInt extends XgHandle {
  size(): number;
}
export interface XgGrammar extends XgHandle {
  ToString(): string;
}
export interface XgCompiledGrammar extends XgHandle {
  MemorySizeBytes?(): number;
}
export interface XgTokenizerInfo extends XgHandle {
  GetVocabSize(): number;
}
export interface XgGrammarCompiler extends XgHandle {
  CompileJSONSchema(
    schema: string,
    anyWhitespace: boolean,
    indent: number | undefined,
    separators: { first: string; second: string } | undefined,
    strictMode: boolean,
    maxWhitespaceCnt: number | undefined,
  ): XgCompiledGrammar;
  CompileBuiltinJSONGrammar(): XgCompiledGrammar;
  CompileGrammar(grammar: XgGrammar): XgCompiledGrammar;
  CompileStructuralTag(json: string): XgCompiledGrammar;
}
export interface XgGrammarMatcher extends XgHandle {
  AcceptToken(token: number, verbose: boolean): boolean;
  GetNextTokenBitmask(vocabSize: number): XgVectorInt;
  IsTerminated(): boolean;
  Rollback(tokens: number): void;
  Reset(): void;
}
export interface XgBinding {
  vecStringFromJSArray(values: string[]): XgHandle;
  vecIntFromJSArray(values: number[]): XgVectorInt;
  vecIntToView(vector: XgVectorInt): Int32Array;
  Grammar: {
    FromEBNF(ebnf: string, rootRule: string): XgGrammar;
    FromJSONSchema(
      schema: string,
      anyWhitespace: boolean,
      indent: number | undefined,
      separators: { first: string; second: string } | undefined,
      strictMode: boolean,
      maxWhitespaceCnt: number | undefined,
      printConverted: boolean,
    ): XgGrammar;
    FromStructuralTag(json: string): XgGrammar;
  };
  TokenizerInfo: new (
    vocab: XgHandle,
    vocabType: string,
    vocabSize: number,
    stopTokenIds: XgVectorInt | undefined,
    prependSpace: boolean,
  ) => XgTokenizerInfo;
  GrammarCompiler: new (info: XgTokenizerInfo, maxThreads: number, cacheEnabled: boolean) => XgGrammarCompiler;
  GrammarMatcher: new (
    compiled: XgCompiledGrammar,
    overrideStopTokens: XgVectorInt | undefined,
    terminateWithoutStopToken: boolean,
    maxRollbackTokens: number,
  ) => XgGrammarMatcher;
}

declare const xgrammar: {
  /** A fresh xgrammar runtime on the compiled module, instantiated synchronously. */
  instantiateSync(module: WebAssembly.Module, printErr: (message: string) => void): XgBinding;
};
export default xgrammar;
