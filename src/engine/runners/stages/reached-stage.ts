// The head's side of one pipeline stage: reaching it (connect, reconnect), the epoch it was opened at, deadlines on
// every call, and telling a restarted stage (its KV gone) from a failed call. The staged runner drives the stages.
import type { NamedAdapter } from '../../adapters/adapter-cache.js';
import { InvalidRequestError } from '../../errors.js';
import type { StageStats } from '../model-runner.js';
import { RunnerUnavailableError } from '../runner-unavailable.js';
import type { KvStage } from './staged-kv-memory.js';
import type { StageCommands, StageEnds, StageInfo, StageLink, StageOpen, StageStep } from './stage-protocol.js';

/** Omit over each member of a union (the built-in one would merge the members). */
export type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Restarts in a row (no pass through in between) after which the pass's requests fail instead of being recomputed. */
export const MAX_LOSSES_IN_A_ROW = 3;

/** How long a stage that does not answer is waited for before the pass fails, unless the head says (PIPELINE_STAGE_WAIT_MS). */
export const STAGE_WAIT_MS = 30_000;

/** How long one call may take before it counts as failed: a hung stage must not hold the engine loop for ever. */
export const CALL_TIMEOUT_MS = 120_000;

/** `call`, or a rejection once `ms` have passed without its answer. */
export function withDeadline<T>(call: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms / 1000} s`)), ms);
  });
  return Promise.race([call, deadline]).finally(() => clearTimeout(timer));
}

/** A stage found restarted by a call: the epoch the call named, which the stage no longer is. */
export interface Lost {
  lost: string;
}

/** Stages a pass found restarted, each with the epoch it found gone. */
export type LostStages = Map<Stage, string | undefined>;

/** One stage as the head keeps it: how to reach it, what it was asked to load, who it is now. */
export class Stage implements KvStage {
  info: StageInfo | undefined;
  pending: StageCommands = { ops: [] };
  readonly stats: StageStats;
  /** The load in flight: concurrent callers share it, so the head never holds one epoch while the stage has another. */
  private connecting: Promise<StageInfo> | undefined;
  /** Passes in a row this stage was found restarted: one the pass itself brings down is not retried for ever. */
  lossesInARow = 0;
  /** Found not answering, and not since: the next failed call does not wait for it again. */
  private away = false;

  constructor(
    readonly link: StageLink,
    readonly open: StageOpen,
    private readonly waitMs = STAGE_WAIT_MS,
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

  private get what(): string {
    return `pipeline stage of layers ${this.from}..${this.to - 1}`;
  }

  /** Loads the stage (again): a new epoch, an empty pool. */
  connect(): Promise<StageInfo> {
    this.info = undefined;
    this.connecting ??= withDeadline(this.link.open(this.open), CALL_TIMEOUT_MS, this.what)
      .catch((err: unknown) => {
        // A refusal (another model, over budget) says why; a stage that cannot be reached is away.
        throw err instanceof InvalidRequestError ? err : this.unavailable(err, 0);
      })
      .then((info) => {
        this.away = false;
        this.info = info;
        Object.assign(this.stats, {
          weightBytes: info.weightBytes,
          kvBytes: info.kvBytes,
          isolateBytes: info.isolateBytes,
        });
        return info;
      })
      .finally(() => {
        this.connecting = undefined;
      });
    return this.connecting;
  }

  /** Closes the stage's pool (as the epoch the head knows); one that fails to answer is left to its restart. */
  async close(): Promise<void> {
    const epoch = this.info?.epoch;
    this.info = undefined;
    this.pending = { ops: [] };
    if (epoch === undefined) return;
    await withDeadline(this.link.close(epoch), CALL_TIMEOUT_MS, this.what).catch(() => undefined);
  }

  /** The commands queued since the last step, handed over. */
  private take(): StageCommands {
    const commands = this.pending;
    this.pending = { ops: [] };
    return commands;
  }

  /**
   * The stage restarted: what it held is gone, the commands queued for it too; it is loaded again for the
   * next pass (tried again then if this fails). Found lost as `epoch` by a pass: where another pass in flight
   * has reloaded it since, that was the same restart, and nothing is done (false).
   */
  async lost(epoch: string | undefined): Promise<boolean> {
    if (this.info?.epoch !== epoch) return false;
    this.stats.restarts++;
    this.lossesInARow++;
    this.pending = { ops: [] };
    this.info = undefined;
    await this.connect().catch(() => undefined);
    return true;
  }

  /**
   * Sends one micro-batch through the stage: the hidden states it returns, or `lost` when it restarted (a new
   * epoch, or a failed call after which it answers as another). The block commands go with the pass's first;
   * a call that fails while the stage lives on gives them back, to go with the next.
   */
  async step(rows: StageStep['rows'], hidden: Float32Array): Promise<Float32Array | Lost> {
    const epoch = await this.currentEpoch();
    const t0 = performance.now();
    const commands = this.take();
    const reply = await this.call(
      epoch,
      () => this.link.step({ epoch, rows, hidden, ...commands }),
      // applying them twice is harmless: copies' sources are immutable
      () => this.pending.ops.unshift(...commands.ops),
    );
    if (reply.lost) return { lost: epoch };
    this.stats.hops++;
    this.stats.hopMs += performance.now() - t0;
    this.stats.computeMs += reply.computeMs;
    this.stats.isolateBytes = reply.isolateBytes ?? this.stats.isolateBytes;
    return reply.hidden;
  }

  /** The stage's rows of the embedding for `ids`, or of the logits for `count` final hidden states. */
  async ends(ends: DistributiveOmit<StageEnds, 'epoch'>): Promise<Float32Array | Lost> {
    const epoch = await this.currentEpoch();
    const reply = await this.call(epoch, () => this.link.ends({ ...ends, epoch }));
    return reply.lost ? { lost: epoch } : reply.values;
  }

  /** Has the stage read `adapter` (its layers' part); a stage found restarted reads it with the pass that reloads it. */
  async adapter(adapter: NamedAdapter): Promise<void> {
    const epoch = await this.currentEpoch();
    await this.call(epoch, () => this.link.adapter({ epoch, adapter }));
  }

  /**
   * Its epoch. Not connected only after a reconnect that failed, and that pass was lost: every sequence is
   * being recomputed, so a fresh stage is what the head expects.
   */
  private async currentEpoch(): Promise<string> {
    return this.info?.epoch ?? (await this.connect()).epoch;
  }

  /**
   * One call to the stage the head knows as `epoch`: its reply, or lost where the call failed because the
   * stage restarted (its process died mid-call); a failure of the call alone (`undo` first) is thrown.
   */
  private async call<R extends { lost: boolean }>(
    epoch: string,
    send: () => Promise<R>,
    undo?: () => void,
  ): Promise<R | { lost: true }> {
    return withDeadline(send(), CALL_TIMEOUT_MS, this.what).catch(async (err: unknown) => {
      const now = await this.answer(err);
      if (now !== epoch) return { lost: true as const };
      undo?.();
      throw err;
    });
  }

  /** Whether the stage answers as another than the head knows (a call that fails says nothing: false). */
  async restarted(): Promise<boolean> {
    const known = this.info?.epoch;
    if (known === undefined) return false;
    const now = await withDeadline(this.link.epoch(), CALL_TIMEOUT_MS, this.what).catch(() => known);
    return now !== known;
  }

  /**
   * After a failed call, who the stage is once it answers again: a restarting stage (a process brought back)
   * is waited for a while, so that its sequences are recomputed rather than failed; `err` if it stays away.
   */
  async answer(err: unknown): Promise<string | undefined> {
    // A stage already found away is asked once: each request does not wait out the restart window again.
    const waitMs = this.away ? 0 : this.waitMs;
    const deadline = performance.now() + waitMs;
    for (let wait = 100; ; wait = Math.min(2 * wait, 1000)) {
      try {
        const epoch = await withDeadline(this.link.epoch(), this.waitMs, this.what);
        this.away = false;
        return epoch;
      } catch {
        if (performance.now() + wait > deadline) throw this.unavailable(err, waitMs);
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  /** The stage stays away: its requests end with a 503 `stage_unavailable`, never as the RPC's own error (a 500). */
  private unavailable(err: unknown, waitedMs: number): RunnerUnavailableError {
    this.away = true;
    const said = err instanceof Error ? err.message : String(err);
    const waited = waitedMs > 0 ? ` for ${waitedMs / 1000} s` : '';
    return new RunnerUnavailableError(`${this.what} did not answer${waited} (${said})`, 'stage_unavailable', {
      cause: err,
    });
  }

  /**
   * A block's layers' part, for the durable store. Never connects nor reconnects: a stage found restarted here
   * fails the read (the chain is not stored), and the next step finds it lost and has everything recomputed.
   */
  async read(block: number): Promise<Uint8Array> {
    const epoch = this.info?.epoch;
    if (epoch === undefined) throw new Error(`${this.what} is not loaded: block ${block} cannot be read`);
    const reply = await withDeadline(this.link.read({ epoch, block }), CALL_TIMEOUT_MS, this.what);
    if (reply.lost) throw new Error(`${this.what} restarted: block ${block} is gone`);
    return reply.bytes;
  }
}
