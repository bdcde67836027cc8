import { heldAdapters, type AdapterCache } from '../engine/adapters/adapter-cache.js';
import type { LoraAdapter } from '../engine/adapters/lora-adapter.js';
import { resolveEngineLimits, type EngineLimits } from '../engine/defaults.js';
import { InvalidRequestError } from '../engine/errors.js';
import { kvBytesPerToken, type ModelConfig } from '../engine/model/config.js';
import type { ModelDtype } from '../engine/model/model-files.js';
import type { KvMemory } from '../engine/kv/kv-memory.js';
import type { PagedSequenceKv } from '../engine/kv/paged-kv.js';
import { settled, type ModelRunner, type StepRow } from '../engine/runners/model-runner.js';
import {
  asInt32,
  decodeFrame,
  encodeFrame,
  FrameError,
  HOST_PATHS,
  HOST_PROTOCOL,
  sameSecret,
  type HostAdapter,
  type HostClose,
  type HostError,
  type HostInfo,
  type HostOpen,
  type HostPass,
  type HostRead,
  type HostSession,
} from '../engine/runners/remote/host-protocol.js';

/** The model a host serves: loaded once, a runner per session over the same weights. */
export interface HostModel {
  info: HostInfo;
  config: ModelConfig;
  dtype: ModelDtype;
  /** The weights file's digest (weights-digest.ts): part of the objects' durable KV identity. */
  digest: string;
  weightBytes: number;
  /** The largest pass the runners' scratch was sized for: an object asking for more is refused. */
  limits: EngineLimits;
  /** A runner for one more session, with a KV pool of its own. */
  runner(limits: EngineLimits): Promise<ModelRunner>;
  /**
   * The LoRA adapters of the model's folder (adapters/), read on first use: where the host's runner runs them and
   * the host keeps a share for them (sessions then say they run adapters).
   */
  adapters?: AdapterCache;
}

export interface GpuHostOptions {
  /** The shared secret every call must carry (`authorization: Bearer`). */
  secret: string;
  /** Sessions kept at once (one per object); the least recently used goes first. */
  maxSessions?: number;
  /** A session unused this long is dropped (wrangler dev and the platform evict idle objects without a word). */
  idleMs?: number;
}

interface Session {
  epoch: string;
  runner: ModelRunner;
  memory: KvMemory;
  numBlocks: number;
  lastUsed: number;
  maxBatchSize: number;
  maxTokensPerStep: number;
  /** Whether its rows may name adapters: the runner runs them and the host keeps them (HostSession.adapters). */
  adapters: boolean;
}

/** What the HTTP server sends back: a status and a frame, or an error in OpenAI's schema. */
export interface HostAnswer {
  status: number;
  body: Uint8Array;
  contentType: string;
}

/** A sequence's view of its blocks as the object sent it: a runner reads blocks, length and writes after it. */
function wireKv(blocks: number[], start: number, variant: LoraAdapter | undefined): PagedSequenceKv {
  // The object's pool checked writability (it owns the bookkeeping); here there is nothing more to know.
  const kv = {
    length: start,
    blocks,
    variant,
    hashes: [],
    advance(n: number) {
      kv.length += n;
    },
    checkWritable() {},
  };
  return kv as unknown as PagedSequenceKv;
}

/** How the host's adapter refusals name both sides. */
const ADAPTER_PARTS = { here: 'the GPU host', sender: 'the object', deploy: 'the host and the service' };

class HostRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/**
 * A GPU host's serving logic, transport aside (server.ts puts it on HTTP): sessions of objects, each a runner with
 * its own KV pool over the one set of weights, and the passes they send. Every call carries the secret; an object
 * opening a session for a model the host was not started for is refused. A pass for an epoch the host does not
 * know (it restarted, or dropped the session) answers `lost`, and computes nothing.
 */
export class GpuHost {
  private readonly sessions = new Map<string, Session>();
  private readonly maxSessions: number;
  private readonly idleMs: number;

  constructor(
    private readonly model: HostModel,
    private readonly options: GpuHostOptions,
  ) {
    if (!options.secret) throw new Error('a GPU host needs a secret');
    this.maxSessions = options.maxSessions ?? 16;
    this.idleMs = options.idleMs ?? 15 * 60_000;
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  async handle(path: string, authorization: string | undefined, body: Uint8Array): Promise<HostAnswer> {
    try {
      const token = /^Bearer (.+)$/.exec(authorization ?? '')?.[1] ?? '';
      if (!sameSecret(token, this.options.secret))
        throw new HostRefusal(401, 'wrong or missing GPU host secret', 'gpu_host_unauthorized');
      const frame = decodeFrame<unknown>(body);
      switch (path) {
        case HOST_PATHS.info:
          return ok(encodeFrame(this.model.info));
        case HOST_PATHS.open:
          return ok(encodeFrame(await this.open(frame.header as HostOpen)));
        case HOST_PATHS.pass:
          return ok(await this.pass(frame.header as HostPass, frame.parts));
        case HOST_PATHS.read:
          return ok(await this.read(frame.header as HostRead));
        case HOST_PATHS.adapter:
          await this.adapter(frame.header as HostAdapter);
          return ok(encodeFrame({}));
        case HOST_PATHS.close:
          await this.close((frame.header as HostClose).epoch);
          return ok(encodeFrame({}));
        default:
          throw new HostRefusal(404, `no GPU host call ${path}`, 'not_found');
      }
    } catch (err) {
      if (err instanceof HostRefusal) return refusal(err.status, err.message, err.code, err.param);
      if (err instanceof FrameError) return refusal(400, err.message, 'invalid_frame');
      if (err instanceof InvalidRequestError) return refusal(409, err.message, err.code, err.param);
      console.error('gpu host: a call failed', err);
      return refusal(500, err instanceof Error ? err.message : String(err), 'internal_error');
    }
  }

  private async open(open: HostOpen): Promise<HostSession> {
    const { model } = this;
    if (open.protocol !== HOST_PROTOCOL)
      throw new HostRefusal(
        409,
        `the object speaks GPU host protocol ${open.protocol}, this host ${HOST_PROTOCOL}`,
        'protocol_mismatch',
      );
    if (open.model !== model.info.model)
      throw new HostRefusal(
        409,
        `this GPU host serves ${JSON.stringify(model.info.model)}, not ${JSON.stringify(open.model)}: start it with that model's folder`,
        'model_not_found',
        'model',
      );
    if (open.dtype !== undefined && open.dtype !== model.dtype)
      throw new HostRefusal(
        409,
        `this GPU host holds the ${model.dtype} weights of ${model.info.model}, not ${open.dtype}`,
        'model_not_found',
        'MODEL_DTYPE',
      );
    const limits = resolveEngineLimits(open.limits);
    if (limits.maxBatchSize > model.limits.maxBatchSize || limits.maxTokensPerStep > model.limits.maxTokensPerStep)
      throw new HostRefusal(
        409,
        `the object's passes (batch ${limits.maxBatchSize}, ${limits.maxTokensPerStep} tokens) are larger than this host's (batch ${model.limits.maxBatchSize}, ${model.limits.maxTokensPerStep} tokens): start it with --max-batch and --max-tokens-per-step at least those`,
        'gpu_host_too_small',
      );
    if (!(Number.isSafeInteger(open.numBlocks) && open.numBlocks >= 1 && open.blockSize === limits.blockSize))
      throw new HostRefusal(400, 'a session needs numBlocks >= 1 and the limits block size', 'invalid_value');
    this.dropIdle();
    while (this.sessions.size >= this.maxSessions) await this.close(this.leastRecent()!);
    const runner = await model.runner(limits);
    let memory: KvMemory;
    try {
      memory = runner.createKvMemory(model.config, open.numBlocks, open.blockSize, open.kvDtype);
    } catch (err) {
      await runner.release();
      throw err;
    }
    const epoch = crypto.randomUUID();
    const adapters = model.adapters !== undefined;
    this.sessions.set(epoch, {
      epoch,
      runner,
      memory,
      numBlocks: open.numBlocks,
      lastUsed: Date.now(),
      maxBatchSize: limits.maxBatchSize,
      maxTokensPerStep: limits.maxTokensPerStep,
      adapters,
    });
    const kvBytes = open.numBlocks * open.blockSize * kvBytesPerToken(model.config, open.kvDtype);
    return {
      ...model.info,
      epoch,
      dtype: model.dtype,
      kvIdentity: runner.kvIdentity,
      digest: model.digest,
      weightBytes: model.weightBytes,
      kvBytes,
      ...(runner.noPromptLogprobs ? { noPromptLogprobs: runner.noPromptLogprobs } : {}),
      ...(adapters ? { adapters } : {}),
    };
  }

  private session(epoch: unknown): Session | undefined {
    const session = typeof epoch === 'string' ? this.sessions.get(epoch) : undefined;
    if (session) session.lastUsed = Date.now();
    return session;
  }

  private async pass(pass: HostPass, parts: Uint8Array[]): Promise<Uint8Array> {
    const session = this.session(pass.epoch);
    if (!session) return encodeFrame({ lost: true });
    const tokens = asInt32(parts[0] ?? new Uint8Array());
    const { vocabSize: V } = this.model.config;
    checkPass(pass, tokens, parts, session, V);
    // Read before the block commands apply: a refused adapter leaves the session's pool as it was.
    const variants = await heldAdapters(
      session.adapters ? this.model.adapters : undefined,
      pass.rows.map((r) => r.adapter),
      ADAPTER_PARTS,
    );
    if (!this.sessions.has(session.epoch)) return encodeFrame({ lost: true });
    for (const op of pass.ops)
      if (op.op === 'copy') session.memory.copyBlock(op.from, op.to);
      else session.memory.writeBlock(op.block, parts[op.part]);
    let at = 0;
    const rows: StepRow[] = pass.rows.map((r, i) => {
      const row = {
        kv: wireKv(r.blocks, r.start, variants[i]),
        tokens: Array.from(tokens.subarray(at, at + r.count)),
        logits: r.logits,
      };
      at += r.count;
      return row;
    });
    const t0 = performance.now();
    const slots = pass.rows.reduce((n, r) => n + r.logits, 0);
    const out = new Float32Array(slots * V);
    // Read before anything yields: a synchronous runner's logits live in scratch another session's pass reuses.
    await settled(session.runner.forward(rows), (logits) => {
      let slot = 0;
      for (const [i, r] of pass.rows.entries())
        for (let j = r.count - r.logits; j < r.count; j++) out.set(logits.at(i, j), slot++ * V);
    });
    return encodeFrame({ lost: false, computeMs: performance.now() - t0 }, [out]);
  }

  private async adapter({ adapter }: HostAdapter): Promise<void> {
    if (!(typeof adapter?.name === 'string' && typeof adapter.identity === 'string'))
      throw new HostRefusal(400, 'an adapter is a name and an identity', 'invalid_value');
    await heldAdapters(this.model.adapters, [adapter], ADAPTER_PARTS);
  }

  private async read(read: HostRead): Promise<Uint8Array> {
    const session = this.session(read.epoch);
    if (!session) return encodeFrame({ lost: true });
    if (!(Number.isSafeInteger(read.block) && read.block >= 0 && read.block < session.numBlocks))
      throw new HostRefusal(400, `block ${read.block} is outside the session's pool`, 'invalid_value');
    return encodeFrame({ lost: false }, [await session.memory.readBlock(read.block)]);
  }

  async close(epoch: string): Promise<void> {
    const session = this.sessions.get(epoch);
    if (!session) return;
    this.sessions.delete(epoch);
    await session.runner.release();
  }

  private leastRecent(): string | undefined {
    let oldest: Session | undefined;
    for (const s of this.sessions.values()) if (!oldest || s.lastUsed < oldest.lastUsed) oldest = s;
    return oldest?.epoch;
  }

  private dropIdle(): void {
    const now = Date.now();
    for (const s of [...this.sessions.values()]) if (now - s.lastUsed > this.idleMs) void this.close(s.epoch);
  }

  /** Every session's KV pool back (the server stops). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.sessions.keys()].map((epoch) => this.close(epoch)));
  }
}

/**
 * A pass's rows, blocks and commands are the object's pool's, or the runner would write bytes it does not own
 * (another session's, in the kernels' one linear memory): checked before anything runs.
 */
function checkPass(pass: HostPass, tokens: Int32Array, parts: Uint8Array[], s: Session, vocab: number): void {
  const bad = (message: string): never => {
    throw new HostRefusal(400, message, 'invalid_pass');
  };
  const block = (b: unknown) => Number.isSafeInteger(b) && (b as number) >= 0 && (b as number) < s.numBlocks;
  if (!Array.isArray(pass.rows) || pass.rows.length === 0 || pass.rows.length > s.maxBatchSize)
    bad(`a pass has 1..${s.maxBatchSize} rows`);
  let total = 0;
  for (const r of pass.rows) {
    if (!Number.isSafeInteger(r.count) || r.count < 1 || !Number.isSafeInteger(r.start) || r.start < 0)
      bad('a row needs a start >= 0 and a count >= 1');
    if (!Number.isSafeInteger(r.logits) || r.logits < 1 || r.logits > r.count) bad('a row asks for 1..count logits');
    if (!Array.isArray(r.blocks) || !r.blocks.every(block)) bad('a row names a block outside the pool');
    if (r.adapter !== undefined && !(typeof r.adapter?.name === 'string' && typeof r.adapter.identity === 'string'))
      bad("a row's adapter is a name and an identity");
    total += r.count;
  }
  if (total > s.maxTokensPerStep) bad(`a pass feeds at most ${s.maxTokensPerStep} tokens`);
  if (tokens.length !== total) bad(`a pass's rows feed ${total} tokens, ${tokens.length} were sent`);
  for (const t of tokens) if (t < 0 || t >= vocab) bad(`token id ${t} is outside the vocabulary (${vocab})`);
  if (!Array.isArray(pass.ops)) bad('a pass carries its block commands');
  for (const op of pass.ops)
    if (op.op === 'copy' ? !block(op.from) || !block(op.to) : op.op !== 'write' || !block(op.block) || !parts[op.part])
      bad('a block command names a block outside the pool');
}

const ok = (body: Uint8Array): HostAnswer => ({ status: 200, body, contentType: 'application/octet-stream' });

function refusal(status: number, message: string, code: string, param: string | null = null): HostAnswer {
  const error: HostError = {
    error: { message, type: status >= 500 ? 'server_error' : 'invalid_request_error', param, code },
  };
  return { status, body: new TextEncoder().encode(JSON.stringify(error)), contentType: 'application/json' };
}
