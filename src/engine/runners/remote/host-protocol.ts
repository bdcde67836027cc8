import type { NamedAdapter } from '../../adapters/adapter-cache.js';
import type { EngineLimits } from '../../defaults.js';
import type { KvDtype } from '../../kv/kv-dtype.js';
import type { ModelDtype } from '../../model/model-files.js';

/**
 * What an object and a GPU host say to each other: the stage protocol's shape (stage-protocol.ts) stretched to
 * the whole model. The object keeps everything the engine knows (tokens, scheduler, block tables, prefix cache,
 * sampling, sessions, durable KV); the host is the runner's memory and compute: weights and KV bytes. One HTTP
 * request per pass, never per token or layer; block copies and restores the object's pool made since the last
 * pass ride with it. Plain data, framed by encodeFrame (a JSON header, then binary parts), so it reads the same
 * in workerd, Node and a browser.
 */

/** The protocol's version: a host and an object of different versions refuse each other by name. */
export const HOST_PROTOCOL = 1;

/** Paths on the host, each a POST of one frame answered by one frame (or a JSON error). */
export const HOST_PATHS = {
  info: '/v1/host',
  open: '/v1/host/open',
  pass: '/v1/host/pass',
  read: '/v1/host/read',
  close: '/v1/host/close',
  adapter: '/v1/host/adapter',
} as const;

/** The header carrying the shared secret (GPU_HOST_SECRET / --secret): `authorization: Bearer <secret>`. */
export const HOST_AUTH_HEADER = 'authorization';

/** What the host says of itself: the model it was started for, and what runs it. */
export interface HostInfo {
  protocol: number;
  /** The model folder's name as the host serves it; an object serving another is refused. */
  model: string;
  /** The runner the host built for its backend (create-runner.ts): `kernels`, `onnxruntime`, later `webgpu`. */
  runner: string;
  /** The host's runtime (`wasm`, `cpu`, `webgpu`), and the GPU adapter where there is one. */
  backend: string;
  adapter: string | null;
}

/** Sent once per object (and again after the host lost its state): the pool the object's engine will fill. */
export interface HostOpen {
  protocol: number;
  model: string;
  /** The weights the object would choose (MODEL_DTYPE), where it names any: a host holding others refuses. */
  dtype?: ModelDtype;
  numBlocks: number;
  blockSize: number;
  kvDtype: KvDtype;
  /** What sizes the runner's scratch: the largest pass the object will send. */
  limits: EngineLimits;
}

/** The host's answer to open: a session of its own (a new epoch per open) and what the engine must know. */
export interface HostSession extends HostInfo {
  epoch: string;
  dtype: ModelDtype;
  /** The host runner's kvIdentity, and the digest of its weights file: the durable KV store's cache identity. */
  kvIdentity: string;
  digest: string;
  weightBytes: number;
  kvBytes: number;
  /** Why the host's runner gives no logits at every position (prompt logprobs), where it cannot. */
  noPromptLogprobs?: string;
  /**
   * Whether a row may name a LoRA adapter: the host's runner runs them and the host reads them from its model
   * folder's adapters/ (its own cache). Absent from a host that cannot: the object refuses adapters by name.
   */
  adapters?: boolean;
}

/** A block operation the object's pool made: a copy-on-write copy, or a restored block's bytes (`part`: its index among the frame's parts). */
export type HostOp = { op: 'copy'; from: number; to: number } | { op: 'write'; block: number; part: number };

/**
 * One pass: each row's block table, start, token count, the logits it wants and its adapter (by name and the
 * SHA-256 of its files: the host reads it from its own folder); the tokens are part 0.
 */
export interface HostPass {
  epoch: string;
  rows: { blocks: number[]; start: number; count: number; logits: number; adapter?: NamedAdapter }[];
  ops: HostOp[];
}

/**
 * A pass's answer: logits (part 0, float32) for each row's last `want[row]` positions, rows in order, or `lost`
 * when the host does not know the epoch (it restarted, or dropped an idle session): its KV is gone.
 */
export type HostPassReply = { lost: false; computeMs: number } | { lost: true };

/** Read a LoRA adapter now (before a pass names it), by name, checked to be the object's files. */
export interface HostAdapter {
  adapter: NamedAdapter;
}

/** A block's bytes for the durable store (part 0 of the answer), or `lost`. */
export interface HostRead {
  epoch: string;
  block: number;
}

export interface HostClose {
  epoch: string;
}

/** An error the host answers with (HTTP 4xx/5xx): OpenAI's error schema, as the service's own. */
export interface HostError {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Logits a row asks for: its last `logits` positions (speculation's), at least 1, at most its tokens. */
export function wantedLogits(row: { count: number; logits?: number }): number {
  return Math.min(row.count, Math.max(1, row.logits ?? 1));
}

const MAGIC = 0x45494831; // "EIH1"

/**
 * One frame: magic (u32), the header's byte length (u32), the header as JSON, then each part 8-byte aligned.
 * The header lists the parts' lengths, so a part can be any typed array's bytes (float32 logits, int32 tokens,
 * a KV block) without a copy into JSON.
 */
export function encodeFrame(header: object, parts: readonly ArrayBufferView[] = []): Uint8Array<ArrayBuffer> {
  const lengths = parts.map((p) => p.byteLength);
  const json = new TextEncoder().encode(JSON.stringify({ h: header, p: lengths }));
  const align = (n: number) => (n + 7) & ~7;
  let size = align(8 + json.length);
  for (const n of lengths) size += align(n);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint32(4, json.length, true);
  out.set(json, 8);
  let at = align(8 + json.length);
  for (const part of parts) {
    out.set(new Uint8Array(part.buffer, part.byteOffset, part.byteLength), at);
    at += align(part.byteLength);
  }
  return out;
}

/** A frame's header and parts; each part a Uint8Array on its own 8-byte-aligned copy, so typed views of it are legal. */
export function decodeFrame<H>(bytes: Uint8Array): { header: H; parts: Uint8Array[] } {
  if (bytes.byteLength < 8) throw new FrameError(`a frame is at least 8 bytes, got ${bytes.byteLength}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== MAGIC) throw new FrameError('not a GPU host frame (bad magic)');
  const jsonLength = view.getUint32(4, true);
  if (8 + jsonLength > bytes.byteLength) throw new FrameError('a frame header runs past the frame');
  let parsed: { h: H; p: number[] };
  try {
    parsed = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + jsonLength)));
  } catch {
    throw new FrameError('a frame header is not JSON');
  }
  if (!Array.isArray(parsed.p) || !parsed.p.every((n) => Number.isSafeInteger(n) && n >= 0))
    throw new FrameError('a frame header lists no part lengths');
  const align = (n: number) => (n + 7) & ~7;
  let at = align(8 + jsonLength);
  const parts: Uint8Array[] = [];
  for (const n of parsed.p) {
    if (at + n > bytes.byteLength) throw new FrameError('a frame part runs past the frame');
    parts.push(bytes.slice(at, at + n));
    at += align(n);
  }
  return { header: parsed.h, parts };
}

/** A malformed frame: the host answers it with a 400, the object with an error naming the host. */
export class FrameError extends Error {}

/** Typed views over a decoded part (its own aligned buffer). */
export const asFloat32 = (part: Uint8Array): Float32Array =>
  new Float32Array(part.buffer, part.byteOffset, part.byteLength / 4);
export const asInt32 = (part: Uint8Array): Int32Array =>
  new Int32Array(part.buffer, part.byteOffset, part.byteLength / 4);

/** Compares two secrets in time that does not depend on where they differ. */
export function sameSecret(given: string, expected: string): boolean {
  const a = new TextEncoder().encode(given);
  const b = new TextEncoder().encode(expected);
  let diff = a.length ^ b.length;
  for (let i = 0; i < b.length; i++) diff |= (a[i % Math.max(1, a.length)] ?? 0) ^ b[i];
  return diff === 0;
}
