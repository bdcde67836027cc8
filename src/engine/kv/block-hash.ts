import { sha256Hex } from './sha256.js';

/**
 * Prefix-cache identity of a full block: SHA-256 chained through its parent's hash, so a block's hash
 * names the whole prefix up to and including it, and over the model id, so two models never share
 * blocks. Collision resistant, since users choose the token ids (see sha256.ts).
 */
export function blockHash(parentHash: string, tokens: ArrayLike<number>, modelId: string): string {
  const text = new TextEncoder().encode(`${modelId}\u0000${parentHash}\u0000`);
  const bytes = new Uint8Array(text.length + tokens.length * 4);
  bytes.set(text);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < tokens.length; i++) view.setUint32(text.length + i * 4, tokens[i]);
  return sha256Hex(bytes);
}

/** The hash before the first block. */
export const ROOT_HASH = '';

/**
 * The hash before the first block of a chain salted with `salt` (vLLM's `cache_salt`): every block hash after
 * it differs from the unsalted chain's and from every other salt's, so blocks (cached or stored) are shared only
 * among requests with the same salt. A SHA-256 of its own domain, so no block's hash can equal it.
 */
export function saltedRoot(salt: string): string {
  return sha256Hex(new TextEncoder().encode(`edge-infer cache salt\u0000${salt}`));
}

/**
 * The hash before the first block of a chain whose rows run with a weights variant (a LoRA adapter) named by
 * `identity`, after `root` (the unsalted or a salted root): its blocks' bytes are that variant's, so they are
 * shared only with requests of the same variant and salt. A SHA-256 of its own domain, as saltedRoot's.
 */
export function variantRoot(root: string, identity: string): string {
  return sha256Hex(new TextEncoder().encode(`edge-infer weights variant\u0000${root}\u0000${identity}`));
}

/**
 * Name of a session's partial last block, the `tokens.length` (< block size) tokens after `parentHash`:
 * hashed apart from full blocks and salted with the session, so only that session's next turn finds it
 * (full blocks are shared by content; a session's latest tokens are not), with its token count after a
 * `+`, so a store can say how many tokens it holds (blockTokens) without the engine.
 */
export function tailHash(parentHash: string, tokens: ArrayLike<number>, modelId: string, session: string): string {
  return `${blockHash(parentHash, tokens, `${modelId}\u0000tail\u0000${session}`)}+${tokens.length}`;
}

/** Whether a stored block's name is a partial last block's (tailHash). */
export function isTail(hash: string): boolean {
  return hash.includes('+');
}

/** Tokens a stored block holds: a partial last block's count, else a full block's `tokensPerBlock`. */
export function blockTokens(hash: string, tokensPerBlock: number): number {
  const plus = hash.indexOf('+');
  return plus < 0 ? tokensPerBlock : Number(hash.slice(plus + 1));
}
