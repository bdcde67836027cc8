import { namedAdapter, type NamedAdapter } from '../../adapters/adapter-cache.js';
import { InvalidRequestError } from '../../errors.js';
import type { KvDtype, KvShape } from '../../kv/block-pool.js';
import { storedBlockBytes, type KvMemory } from '../../kv/kv-memory.js';
import type { ModelConfig } from '../../model/config.js';
import {
  KvLostError,
  type HostStats,
  type ModelRunner,
  type RunnerName,
  type RunnerStats,
  type StepLogits,
  type StepRow,
} from '../model-runner.js';
import { HostUnavailableError, type HostLink } from './host-link.js';
import {
  asFloat32,
  decodeFrame,
  encodeFrame,
  HOST_PATHS,
  HOST_PROTOCOL,
  wantedLogits,
  type HostAdapter,
  type HostInfo,
  type HostOp,
  type HostOpen,
  type HostPass,
  type HostPassReply,
  type HostSession,
} from './host-protocol.js';

/** Losses in a row (no pass through in between) after which the pass's requests fail instead of being recomputed. */
const MAX_LOSSES_IN_A_ROW = 3;

/** What the host says of itself (GET-like POST of an empty frame): to name its runner before a session is open. */
export async function hostInfo(link: HostLink): Promise<HostInfo> {
  return decodeFrame<HostInfo>(await link.post(HOST_PATHS.info, encodeFrame({}))).header;
}

/**
 * The engine's runner where a GPU host runs the model: the object keeps the scheduler, block tables, prefix
 * cache, sampling and sessions; the host holds the weights and the KV bytes, and computes each pass. A pass is
 * one message (block tables, positions, tokens, the block copies and restores queued since the last one); the
 * answer is the logits of the positions the engine reads. The host runs whatever runner its backend builds
 * (our kernels, onnxruntime, WebGPU), so its logits, and the greedy tokens, are that runner's in one process.
 *
 * A host that restarted (or dropped this session) no longer knows the epoch: the pass fails as lost KV and the
 * engine recomputes its sequences on a new session. A host that cannot be reached fails the pass with
 * HostUnavailableError (each request in it ends with a 503); the next pass finds it again or fails the same way.
 */
export class RemoteRunner implements ModelRunner {
  readonly name: RunnerName;
  readonly kvIdentity: string;
  readonly deviceSampling = undefined;
  readonly noPromptLogprobs: string;
  private session: HostSession | undefined;
  /** The KV the engine thinks the host holds is gone (a failed call left it unknown): recomputed before the next pass. */
  private kvDoubtful = false;
  private pending: HostOp[] = [];
  private writes: Uint8Array[] = [];
  private lossesInARow = 0;
  private released = false;
  /** Adapters the host has read (by identity): asked once, not on every request that names one. */
  private readonly prepared = new Set<string>();
  private readonly counters = { passes: 0, passMs: 0, computeMs: 0, reconnects: 0, failures: 0 };

  private constructor(
    readonly config: ModelConfig,
    private readonly link: HostLink,
    private readonly open: HostOpen,
    first: HostSession,
  ) {
    this.session = first;
    this.name = first.runner as RunnerName;
    this.kvIdentity = `host:${first.kvIdentity}`;
    this.noPromptLogprobs =
      first.noPromptLogprobs ??
      'prompt logprobs need logits at every prompt position, and the GPU host sends back only the positions sampled from';
  }

  /** Opens a session on the host (its KV pool for this engine); a host serving another model refuses. */
  static async connect(config: ModelConfig, link: HostLink, open: Omit<HostOpen, 'protocol'>): Promise<RemoteRunner> {
    const full = { ...open, protocol: HOST_PROTOCOL };
    return new RemoteRunner(config, link, full, await openSession(link, full));
  }

  /** Rows may run with a LoRA adapter each where the host said it runs them (HostSession.adapters). */
  get rowAdapters(): boolean {
    return this.session?.adapters === true;
  }

  /** Has the host read the adapter now: one it cannot run is refused at load, naming it, not in a later pass. */
  async prepareAdapter(adapter: NamedAdapter): Promise<void> {
    if (this.prepared.has(adapter.identity)) return;
    try {
      await this.link.post(HOST_PATHS.adapter, encodeFrame({ adapter } satisfies HostAdapter));
    } catch (err) {
      if (!(err instanceof InvalidRequestError)) throw err;
      throw new InvalidRequestError('model', `adapter '${adapter.name}': ${err.message}`, 'invalid_adapter');
    }
    this.prepared.add(adapter.identity);
  }

  /** The host's figures at open: the weights' digest (the durable KV store's identity) and the bytes it holds. */
  get opened(): HostSession | undefined {
    return this.session;
  }

  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): KvMemory {
    const { open } = this;
    if (numBlocks !== open.numBlocks || blockSize !== open.blockSize || dtype !== open.kvDtype)
      throw new Error(
        `the GPU host was opened for ${open.numBlocks} blocks of ${open.blockSize} (${open.kvDtype}), not ${numBlocks} of ${blockSize} (${dtype})`,
      );
    const blockBytes = storedBlockBytes(shape, blockSize, dtype);
    return {
      blockBytes,
      copyBlock: (from, to) => void this.pending.push({ op: 'copy', from, to }),
      writeBlock: (block, bytes) => {
        if (bytes.length !== blockBytes)
          throw new RangeError(`a KV block holds ${blockBytes} bytes, got ${bytes.length}`);
        this.pending.push({ op: 'write', block, part: 1 + this.writes.length });
        this.writes.push(bytes.slice());
      },
      readBlock: (block) => this.readBlock(block),
    };
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    if (this.released) throw new Error('this runner was released');
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);
    const session = await this.ready();
    const wire = rows.map(({ kv, tokens, logits }) => ({
      blocks: [...kv.blocks],
      start: kv.length,
      count: tokens.length,
      logits: wantedLogits({ count: tokens.length, logits }),
      ...namedAdapter(kv.variant),
    }));
    const tokens = Int32Array.from(rows.flatMap((r) => r.tokens));
    // The queued block commands go with this pass; any queued while it is out go with the next.
    const pass: HostPass = { epoch: session.epoch, rows: wire, ops: this.pending };
    const frame = encodeFrame(pass, [tokens, ...this.writes]);
    this.pending = [];
    this.writes = [];
    const t0 = performance.now();
    let reply: { header: HostPassReply; parts: Uint8Array[] };
    try {
      reply = decodeFrame<HostPassReply>(await this.link.post(HOST_PATHS.pass, frame));
    } catch (err) {
      // Whether the host applied the block commands is unknown: its pool is recomputed once it is back.
      this.counters.failures++;
      this.kvDoubtful = true;
      throw err;
    }
    this.counters.passes++;
    this.counters.passMs += performance.now() - t0;
    if (reply.header.lost) {
      this.session = undefined;
      this.kvDoubtful = false;
      return this.lost(`the GPU host at ${this.link.where} lost this engine's session (it restarted)`);
    }
    this.counters.computeMs += reply.header.computeMs;
    this.lossesInARow = 0;
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    return passLogits(wire, asFloat32(reply.parts[0] ?? new Uint8Array()), this.config.vocabSize);
  }

  /**
   * The session to send a pass to: the one open, or, where the host lost it (or a failed call left its pool in
   * doubt), a new one, after which this pass fails as lost KV so the engine recomputes its sequences over it.
   */
  private async ready(): Promise<HostSession> {
    if (this.session && !this.kvDoubtful) return this.session;
    const old = this.session;
    this.session = undefined;
    this.pending = [];
    this.writes = [];
    this.session = await openSession(this.link, this.open);
    this.counters.reconnects++;
    if (old) void this.closeSession(old.epoch);
    // A session found lost was told to the engine then, which recomputes over the new one; a failed call not yet.
    if (!this.kvDoubtful) return this.session;
    this.kvDoubtful = false;
    return this.lost(`the GPU host at ${this.link.where} was reconnected: the KV it held may be gone`);
  }

  private lost(message: string): never {
    this.lossesInARow++;
    const fatal = this.lossesInARow > MAX_LOSSES_IN_A_ROW;
    if (fatal) this.lossesInARow = 0;
    throw new KvLostError(fatal ? `${message} (${MAX_LOSSES_IN_A_ROW} passes in a row)` : message, fatal);
  }

  private async readBlock(block: number): Promise<Uint8Array> {
    const session = this.session;
    if (!session || this.kvDoubtful) throw new Error(`the GPU host's KV is gone: block ${block} cannot be read`);
    const reply = decodeFrame<{ lost: boolean }>(
      await this.link.post(HOST_PATHS.read, encodeFrame({ epoch: session.epoch, block })),
    );
    if (reply.header.lost) throw new Error(`the GPU host lost this engine's session: block ${block} is gone`);
    return reply.parts[0];
  }

  private async closeSession(epoch: string): Promise<void> {
    await this.link.post(HOST_PATHS.close, encodeFrame({ epoch })).catch(() => undefined);
  }

  stats(): RunnerStats {
    const s = this.session;
    const host: HostStats = {
      where: this.link.where,
      connected: s !== undefined && !this.kvDoubtful,
      runner: this.name,
      backend: s?.backend ?? null,
      adapter: s?.adapter ?? null,
      weightBytes: s?.weightBytes ?? 0,
      kvBytes: s?.kvBytes ?? 0,
      ...this.counters,
    };
    return { runner: this.name, host };
  }

  async release(): Promise<void> {
    this.released = true;
    const s = this.session;
    this.session = undefined;
    if (s) await this.closeSession(s.epoch);
  }
}

async function openSession(link: HostLink, open: HostOpen): Promise<HostSession> {
  const session = decodeFrame<HostSession>(await link.post(HOST_PATHS.open, encodeFrame(open))).header;
  if (typeof session.epoch !== 'string')
    throw new HostUnavailableError(`the GPU host at ${link.where} opened no session`);
  return session;
}

/** Logits laid out as the host sends them: each row's last `logits` positions, rows in order. */
export function passLogits(
  rows: readonly { count: number; logits: number }[],
  values: Float32Array,
  vocab: number,
): StepLogits {
  const first: number[] = [];
  let slots = 0;
  for (const row of rows) {
    first.push(slots);
    slots += row.logits;
  }
  if (values.length !== slots * vocab)
    throw new Error(`the GPU host sent ${values.length} logits, ${slots} positions × ${vocab} were expected`);
  const view = (slot: number): Float32Array => values.subarray(slot * vocab, (slot + 1) * vocab);
  return {
    last: (row) => view(first[row] + rows[row].logits - 1),
    at: (row, index) => {
      const fromEnd = rows[row].count - 1 - index;
      if (fromEnd < 0 || fromEnd >= rows[row].logits)
        throw new Error(`row ${row}'s logits at ${index} were not asked for (the GPU host sends no others)`);
      return view(first[row] + rows[row].logits - 1 - fromEnd);
    },
  };
}
