import type { KvDtype, KvShape } from '../kv/block-pool.js';
import { kernelRows, type KernelRunner } from '../kernels/kernel-runner.js';
import type { LayerSpan } from '../kernels/weights/llama-weights.js';
import type { ModelConfig } from '../model/config.js';
import {
  KvLostError,
  type ModelRunner,
  type RunnerStats,
  type StageStats,
  type StepLogits,
  type StepRow,
} from '../runners/model-runner.js';
import { StagedKvMemory, type KvStage } from './staged-kv-memory.js';
import type { StageCommands, StageInfo, StageLink, StageOpen } from './stage-protocol.js';

/** Restarts in a row (no pass through in between) after which the pass fails instead of being recomputed. */
const MAX_LOSSES_IN_A_ROW = 3;

/** How long a stage that does not answer is waited for before the pass fails. */
const STAGE_WAIT_MS = 30_000;

/** One stage as the head keeps it: how to reach it, what it was asked to load, who it is now. */
class Stage implements KvStage {
  info: StageInfo | undefined;
  pending: StageCommands = { copies: [], writes: [] };
  readonly stats: StageStats;

  constructor(
    readonly link: StageLink,
    readonly open: StageOpen,
  ) {
    this.stats = {
      layers: { from: open.span.from, to: open.span.to },
      weightBytes: 0,
      kvBytes: 0,
      isolateBytes: undefined,
      hops: 0,
      hopMs: 0,
      computeMs: 0,
      restarts: 0,
    };
  }

  get from(): number {
    return this.open.span.from;
  }

  get to(): number {
    return this.open.span.to;
  }

  /** Loads the stage (again): a new epoch, an empty pool. */
  async connect(): Promise<StageInfo> {
    this.info = undefined;
    const info = await this.link.open(this.open);
    this.info = info;
    Object.assign(this.stats, {
      weightBytes: info.weightBytes,
      kvBytes: info.kvBytes,
      isolateBytes: info.isolateBytes,
    });
    return info;
  }

  /** The commands queued since the last message, handed over (a lost stage's are dropped with its pool). */
  take(): StageCommands {
    const commands = this.pending;
    this.pending = { copies: [], writes: [] };
    return commands;
  }

  /** The stage restarted: what it held is gone; it is loaded again for the next pass. */
  async lost(): Promise<never> {
    this.stats.restarts++;
    this.pending = { copies: [], writes: [] };
    this.info = undefined;
    const { from, to } = this.stats.layers;
    try {
      await this.connect();
    } catch {
      // Tried again before the next pass.
    }
    throw new KvLostError(`pipeline stage of layers ${from}..${to - 1} restarted: its KV blocks are gone`);
  }

  /**
   * After a failed call, who the stage is once it answers again: a restarting stage (a process brought back)
   * is waited for a while, so that its sequences are recomputed rather than failed; `err` if it stays away.
   */
  async answer(err: unknown): Promise<string | undefined> {
    const deadline = performance.now() + STAGE_WAIT_MS;
    for (let wait = 100; ; wait = Math.min(2 * wait, 1000)) {
      try {
        return await this.link.epoch();
      } catch {
        if (performance.now() + wait > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  async read(block: number): Promise<Uint8Array> {
    const epoch = this.info?.epoch ?? (await this.connect()).epoch;
    const reply = await this.link.read({ epoch, block, ...this.take() });
    if (reply.lost) return this.lost();
    return reply.bytes;
  }
}

/**
 * The head's runner of a model split over pipeline stages: the ends (embedding, final norm, output
 * projection) on its own kernels, the layers on the stages. A pass embeds every row's tokens, sends the
 * hidden states through each stage in layer order (one message each: block tables, positions, queued block
 * commands, hidden states as bytes), and turns what the last returns into logits. Each stage runs the same
 * kernels on the same rows, so the logits are bit-identical to one process's, in any batch.
 */
export class StagedRunner implements ModelRunner {
  readonly name = 'kernels';
  /** The blocks' bytes are the one-process kernels' bytes: stored blocks restore across both. */
  readonly kvIdentity = 'kernels';
  readonly deviceSampling = undefined;
  private readonly stages: Stage[];
  private released = false;
  /** Stage restarts since the last pass that went through: a stage the pass itself brings down is not retried for ever. */
  private lossesInARow = 0;

  private constructor(
    readonly config: ModelConfig,
    private readonly head: KernelRunner,
    stages: Stage[],
  ) {
    this.stages = stages;
  }

  /** Opens every stage (in parallel: each loads its layers) and returns the runner over them. */
  static async open(
    config: ModelConfig,
    head: KernelRunner,
    links: readonly StageLink[],
    spans: readonly LayerSpan[],
    open: Omit<StageOpen, 'span'>,
  ): Promise<StagedRunner> {
    if (links.length !== spans.length) throw new Error(`${spans.length} stages planned, ${links.length} links given`);
    const stages = spans.map((span, i) => new Stage(links[i], { ...open, span }));
    await Promise.all(stages.map((stage) => stage.connect()));
    return new StagedRunner(config, head, stages);
  }

  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): StagedKvMemory {
    const open = this.stages[0].open;
    if (numBlocks !== open.numBlocks || blockSize !== open.limits.blockSize || dtype !== open.kvDtype)
      throw new Error(
        `the stages were opened for ${open.numBlocks} blocks of ${open.limits.blockSize} (${open.kvDtype}), not ${numBlocks} of ${blockSize} (${dtype})`,
      );
    return new StagedKvMemory(shape, blockSize, dtype === 'fp16' ? 2 : 4, this.stages);
  }

  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    if (this.released) throw new Error('this runner was released');
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);
    const passRows = kernelRows(rows);
    const wire = passRows.map(({ blocks, start, count }) => ({ blocks: [...blocks], start, count }));
    let hidden = this.head.forwardHidden(
      passRows,
      rows.flatMap((r) => r.tokens),
    );
    for (const stage of this.stages) {
      const epoch = stage.info?.epoch ?? (await stage.connect()).epoch;
      const t0 = performance.now();
      const reply = await stage.link
        .step({ epoch, rows: wire, hidden, ...stage.take() })
        .catch(async (err: unknown) => {
          // A call that failed: the stage restarted (its process died mid-call), or the pass failed there.
          const now = await stage.answer(err);
          if (now === epoch) throw err;
          return { lost: true as const, epoch: now };
        });
      if (reply.lost) {
        if (++this.lossesInARow > MAX_LOSSES_IN_A_ROW)
          throw new Error(
            `pipeline stage of layers ${stage.from}..${stage.to - 1} restarted ${MAX_LOSSES_IN_A_ROW} passes in a row; the pass is given up`,
          );
        return stage.lost();
      }
      stage.stats.hops++;
      stage.stats.hopMs += performance.now() - t0;
      stage.stats.computeMs += reply.computeMs;
      stage.stats.isolateBytes = reply.isolateBytes ?? stage.stats.isolateBytes;
      hidden = reply.hidden;
    }
    this.lossesInARow = 0;
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    // Synchronous from here: the logits lie in the head's shared scratch until its next pass.
    return this.head.logitsFromHidden(passRows, hidden);
  }

  stats(): RunnerStats {
    return { ...this.head.stats(), stages: this.stages.map((s) => ({ ...s.stats })) };
  }

  async release(): Promise<void> {
    this.released = true;
    await this.head.release();
  }
}
