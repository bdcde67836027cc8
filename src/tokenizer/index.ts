export { TextTokenizer, type DecodeOptions, type TokenBytesOptions } from './tokenizer.js';
export { IncrementalDetokenizer, type IncrementalDetokenizerOptions } from './incremental-detokenizer.js';
export { renderChat, validateMessages, type TemplateMessage, type RenderChatOptions } from './chat-template.js';
export { BYTE_TO_CHAR, byteLevelToBytes, bytesToByteLevel, gpt2PreTokenize } from './byte-level.js';
