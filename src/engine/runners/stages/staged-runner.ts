import type { NamedAdapter } from '../../adapters/adapter-cache.js';
import type { KvDtype, KvShape } from '../../kv/block-pool.js';
import { kernelRows, StaleLogitsError, type KernelRow } from '../wasm/kernel-pass.js';
import type { KernelStageRunner } from '../wasm/kernel-stage-runner.js';
import type { LayerSpan } from '../wasm/weights/llama-weights.js';
import type { ModelConfig } from '../../model/config.js';
import { KvLostError, type ModelRunner, type RunnerStats, type StepLogits, type StepRow } from '../model-runner.js';
import { microBatches, type MicroBatch } from './micro-batches.js';
import { MAX_LOSSES_IN_A_ROW, Stage, type LostStages } from './reached-stage.js';
import { StagedKvMemory } from './staged-kv-memory.js';
import type { StageLink, StageOpen } from './stage-protocol.js';

/**
 * The head's runner of a model split over pipeline stages: the ends (embedding, final norm, output
 * projection) on its own kernels, the layers on the stages. A pass embeds every row's tokens, sends the
 * hidden states through each stage in layer order (one message each: block tables, positions, queued block
 * commands, hidden states as bytes), and turns what the last returns into logits. Each stage runs the same
 * kernels on the same rows, so the logits are bit-identical to one process's, in any batch.
 *
 * A vocabulary too large for the head (PIPELINE_VOCAB; Llama-3.2-1B's 128k-token table) is split by rows
 * over the stages instead: the embedding comes from the stages holding each token's row, and each stage
 * computes its rows' logits for the positions sampled from, all in parallel, the head holding no weight.
 */
export class StagedRunner implements ModelRunner {
  readonly name = 'kernels';
  /** The blocks' bytes are the one-process kernels' bytes: stored blocks restore across both. */
  readonly kvIdentity = 'kernels';
  readonly deviceSampling = undefined;
  /** A row's adapter changes only layers, which the stages hold: each applies its layers' part (StageStep rows). */
  readonly rowAdapters = true;

  /** Adapters every stage has read (by identity): asked once, not on every request that names one. */
  private readonly prepared = new Set<string>();

  private readonly stages: Stage[];
  private released = false;

  /** The stages holding rows of the vocabulary, where the head holds none. */
  private readonly vocabStages: Stage[];
  readonly noPromptLogprobs?: string;

  /** Has every stage read the adapter (its layers' part): a stage that cannot refuses the request naming it. */
  async prepareAdapter(adapter: NamedAdapter): Promise<void> {
    if (this.prepared.has(adapter.identity)) return;
    await Promise.all(this.stages.map((s) => s.adapter(adapter)));
    this.prepared.add(adapter.identity);
  }

  private constructor(
    readonly config: ModelConfig,
    /** The head's kernels over the ends; none where the vocabulary is split over the stages. */
    private readonly head: KernelStageRunner | undefined,
    stages: Stage[],
    /** Micro-batches a pass is split into (at most one per row): the stages that can work at once. */
    private readonly microBatches: number,
    /** Passes the engine may keep in flight (each on another stage at a time). */
    readonly passesInFlight: number,
  ) {
    this.stages = stages;
    this.vocabStages = stages.filter((s) => s.open.span.vocab);
    if (!head && this.vocabStages.length === 0) throw new Error('neither the head nor a stage holds the vocabulary');
    if (!head)
      this.noPromptLogprobs =
        "prompt logprobs need logits at every prompt position, and this model's vocabulary is split over its pipeline stages, which compute the positions sampled from only";
  }

  /** Opens every stage (in parallel: each loads its layers) and returns the runner over them. */
  static async open(
    config: ModelConfig,
    head: KernelStageRunner | undefined,
    links: readonly StageLink[],
    spans: readonly LayerSpan[],
    open: Omit<StageOpen, 'span'>,
    flow: { microBatches?: number; inFlight?: number; stageWaitMs?: number } = {},
  ): Promise<StagedRunner> {
    if (links.length !== spans.length) throw new Error(`${spans.length} stages planned, ${links.length} links given`);
    const stages = spans.map((span, i) => new Stage(links[i], { ...open, span }, flow.stageWaitMs));
    await Promise.all(stages.map((stage) => stage.connect()));
    // By default one pass in flight per stage, each whole: every stage busy with no pipeline bubble per step.
    const inFlight = Math.max(1, flow.inFlight ?? spans.length);
    return new StagedRunner(config, head, stages, Math.max(1, flow.microBatches ?? 1), inFlight);
  }

  createKvMemory(shape: KvShape, numBlocks: number, blockSize: number, dtype: KvDtype): StagedKvMemory {
    const open = this.stages[0].open;
    if (numBlocks !== open.numBlocks || blockSize !== open.limits.blockSize || dtype !== open.kvDtype)
      throw new Error(
        `the stages were opened for ${open.numBlocks} blocks of ${open.limits.blockSize} (${open.kvDtype}), not ${numBlocks} of ${blockSize} (${dtype})`,
      );
    return new StagedKvMemory(shape, blockSize, dtype, this.stages);
  }

  /**
   * One pass. With several stages and rows, the rows may go through in micro-batches (GPipe's): while stage 2
   * computes the first, stage 1 computes the second. Several passes may be in flight at once (the engine's
   * lanes, `passesInFlight`), so stages that run in parallel (objects on their own threads, or `wrangler dev`
   * processes) all work at once without a bubble per step. Every stage sees messages in the order they were
   * sent (block commands with the first after they were made), and rows are independent, so the logits are
   * those of one batch.
   */
  async forward(rows: readonly StepRow[]): Promise<StepLogits> {
    if (this.released) throw new Error('this runner was released');
    for (const { kv, tokens } of rows) kv.checkWritable(tokens.length);
    const passRows = kernelRows(rows);
    // The head's kernels run the ends, which no adapter changes: its rows carry none (nothing placed in its memory).
    const headRows = passRows.some((r) => r.variant !== undefined)
      ? passRows.map(({ variant: _adapter, ...row }) => row)
      : passRows;
    const H = this.config.hiddenSize;
    const lost: LostStages = new Map();
    const ids = rows.flatMap((r) => r.tokens);
    const hidden = this.head ? this.head.forwardHidden(headRows, ids) : await this.embed(ids, lost);
    if (lost.size) return this.passLost(lost);
    const groups: (MicroBatch & { hidden: Float32Array })[] = microBatches(
      passRows,
      Math.min(this.microBatches, rows.length),
    ).map((g) => ({
      ...g,
      hidden: hidden.slice(g.firstToken * H, (g.firstToken + g.tokens) * H),
    }));
    // chain[s]: stage s's last micro-batch; a micro-batch enters stage s when it left stage s - 1 and stage s
    // is done with the one before it.
    const chain: Promise<unknown>[] = this.stages.map(() => Promise.resolve());
    const runs = groups.map(async (group) => {
      let ready: Promise<unknown> = Promise.resolve();
      for (const [s, stage] of this.stages.entries()) {
        const turn = Promise.all([ready, chain[s]]).then(async () => {
          if (lost.size) return; // the pass is lost already: recomputed, not finished
          const reply = await stage.step(group.wire, group.hidden);
          if (reply instanceof Float32Array) group.hidden = reply;
          else lost.set(stage, reply.lost);
        });
        chain[s] = turn.catch(() => undefined);
        ready = turn;
      }
      await ready;
    });
    const settled = await Promise.allSettled(runs);
    if (lost.size) return this.passLost(lost);
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    const out = new Float32Array(hidden.length);
    for (const g of groups) out.set(g.hidden, g.firstToken * H);
    if (this.head) {
      for (const stage of this.stages) stage.lossesInARow = 0;
      for (const { kv, tokens } of rows) kv.advance(tokens.length);
      return this.headLogits(headRows, out);
    }
    const logits = await this.vocabLogits(headRows, out, lost);
    if (lost.size) return this.passLost(lost);
    for (const stage of this.stages) stage.lossesInARow = 0;
    for (const { kv, tokens } of rows) kv.advance(tokens.length);
    return logits;
  }

  /**
   * The head's logits for a pass's final hidden states. They lie in the head's scratch, which the next pass of
   * another lane may reuse before the engine reads them: a position read after that is computed again, alone,
   * from its hidden state (the kernels' rows are batch-invariant: the same bits).
   */
  private headLogits(rows: readonly KernelRow[], hidden: Float32Array): StepLogits {
    const head = this.head!;
    const logits = head.logitsFromHidden(rows, hidden);
    if (this.passesInFlight === 1) return logits;
    const H = this.config.hiddenSize;
    const firstToken: number[] = [];
    let token = 0;
    for (const row of rows) {
      firstToken.push(token);
      token += row.count;
    }
    const again = (row: number, index: number): Float32Array => {
      const t = firstToken[row] + index;
      const one = head.logitsFromHidden([{ blocks: [], start: 0, count: 1 }], hidden.slice(t * H, (t + 1) * H));
      return one.last(0).slice();
    };
    const read = (row: number, index: number, view: () => Float32Array): Float32Array => {
      try {
        return view();
      } catch (err) {
        if (err instanceof StaleLogitsError) return again(row, index);
        throw err;
      }
    };
    return {
      last: (row) => read(row, rows[row].count - 1, () => logits.last(row)),
      at: (row, index) => read(row, index, () => logits.at(row, index)),
    };
  }

  /**
   * Stages restarted during the pass: they are reloaded now, whatever comes next (a pass after this one must
   * meet the stages the head knows), and the pass fails as lost KV, to be recomputed. A pass stops at the first
   * stage it finds lost, so the stages it never reached are asked who they are: after `wrangler dev` evicted
   * every idle stage, three passes each found one, and the third failed as "restarted 3 passes in a row". A
   * stage that another pass in flight found lost and reloaded already is the same restart, counted once.
   */
  private async passLost(lost: LostStages): Promise<never> {
    await Promise.all(
      this.stages
        .filter((stage) => !lost.has(stage))
        .map(async (stage) => {
          const known = stage.info?.epoch;
          if (await stage.restarted()) lost.set(stage, known);
        }),
    );
    const reloaded: Stage[] = [];
    for (const [stage, epoch] of lost) if (await stage.lost(epoch)) reloaded.push(stage);
    const where = [...lost.keys()].map((s) => `${s.from}..${s.to - 1}`).join(', ');
    const fatal = reloaded.some((stage) => stage.lossesInARow >= MAX_LOSSES_IN_A_ROW);
    if (fatal) for (const stage of this.stages) stage.lossesInARow = 0;
    throw new KvLostError(
      `pipeline stage${lost.size > 1 ? 's' : ''} of layers ${where} restarted${fatal ? ` ${MAX_LOSSES_IN_A_ROW} passes in a row` : ''}: ${lost.size > 1 ? 'their' : 'its'} KV blocks are gone`,
      fatal,
    );
  }

  /** The embedding of `ids` from the stages holding their rows (a vocabulary split over the stages), in parallel. */
  private async embed(ids: readonly number[], lost: LostStages): Promise<Float32Array> {
    const { hiddenSize: H, vocabSize } = this.config;
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
        throw new RangeError(`token id ${id} is outside the vocabulary (${vocabSize})`);
    const out = new Float32Array(ids.length * H);
    await Promise.all(
      this.vocabStages.map(async (stage) => {
        const { from, to } = stage.open.span.vocab!;
        const at = ids.flatMap((id, t) => (id >= from && id < to ? [t] : []));
        if (at.length === 0) return;
        const reply = await stage.ends({ op: 'embed', ids: at.map((t) => ids[t]) });
        if (!(reply instanceof Float32Array)) return void lost.set(stage, reply.lost);
        for (const [i, t] of at.entries()) out.set(reply.subarray(i * H, (i + 1) * H), t * H);
      }),
    );
    return out;
  }

  /**
   * Logits from the stages holding the vocabulary's rows: each row's last positions asked for (its last token,
   * or a verification's proposals and the token after them), every one of them computed now (no position is
   * left to compute later: the stages are a call away), each stage its rows of every position, in parallel.
   */
  private async vocabLogits(rows: readonly KernelRow[], hidden: Float32Array, lost: LostStages): Promise<StepLogits> {
    const { hiddenSize: H, vocabSize: V } = this.config;
    const want = rows.map((r) => Math.min(r.count, Math.max(1, r.logits ?? 1)));
    const first: number[] = [];
    const positions: number[] = [];
    let token = 0;
    for (const [r, row] of rows.entries()) {
      first.push(positions.length);
      for (let j = row.count - want[r]; j < row.count; j++) positions.push(token + j);
      token += row.count;
    }
    const picked = new Float32Array(positions.length * H);
    for (const [i, t] of positions.entries()) picked.set(hidden.subarray(t * H, (t + 1) * H), i * H);
    const logits = new Float32Array(positions.length * V);
    // At most a batch of positions a call: a stage's scratch holds that many rows of logits.
    const perCall = this.stages[0].open.limits.maxBatchSize;
    await Promise.all(
      this.vocabStages.map(async (stage) => {
        const { from, to } = stage.open.span.vocab!;
        const width = to - from;
        for (let p0 = 0; p0 < positions.length && !lost.size; p0 += perCall) {
          const count = Math.min(perCall, positions.length - p0);
          const reply = await stage.ends({ op: 'logits', hidden: picked.slice(p0 * H, (p0 + count) * H), count });
          if (!(reply instanceof Float32Array)) return void lost.set(stage, reply.lost);
          for (let i = 0; i < count; i++) logits.set(reply.subarray(i * width, (i + 1) * width), (p0 + i) * V + from);
        }
      }),
    );
    const view = (slot: number): Float32Array => logits.subarray(slot * V, (slot + 1) * V);
    return {
      last: (row) => view(first[row] + want[row] - 1),
      at: (row, index) => {
        const fromEnd = rows[row].count - 1 - index;
        if (fromEnd < 0 || fromEnd >= want[row])
          throw new Error(`row ${row}'s logits at ${index} were not asked for (a split vocabulary computes no others)`);
        return view(first[row] + want[row] - 1 - fromEnd);
      },
    };
  }

  stats(): RunnerStats {
    return { ...(this.head?.stats() ?? { runner: 'kernels' }), stages: this.stages.map((s) => ({ ...s.stats })) };
  }

  /** Gives back the head's kernels and every stage's pool; a stage that cannot be reached has lost it already. */
  async release(): Promise<void> {
    this.released = true;
    await Promise.all([this.head?.release(), ...this.stages.map((stage) => stage.close())]);
  }
}
