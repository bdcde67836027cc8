// The engine's time per decode step outside the model pass, measured from outside (the engine has no
// timing hooks of its own): Engine.step, OnnxRunner.forward and the ONNX session's run are wrapped on
// the instances for the length of one measurement, then restored.
//   step period  = from one step's start to the next's (everything the loop does per token)
//   model        = session.run: the ONNX graph, including the runtime copying tensors in and out; on the edge
//                  kernels (no session, nothing gathered) the whole of forward
//   gather/scatter = forward − model: building feeds, gathering past KV from the pool, scattering new KV
//   engine       = step − forward: scheduling, sampling, detokenisation, stop checks, event pushes
//   loop         = period − step: the event-loop turn between steps, consumers reading their streams
import type { Engine } from '../../src/engine/engine.js';
import type { OrtSession } from '../../src/engine/model/runtime.js';
import { engineDecode } from './engine-runs.js';

export interface StepPhases {
  /** Milliseconds per decode step, medians over the steps of one measurement. */
  periodMs: number;
  modelMs: number;
  gatherScatterMs: number;
  engineMs: number;
  loopMs: number;
  /** (period − model) / period: the share of a step spent outside the model pass. */
  outsideShare: number;
  steps: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] ?? NaN;

export async function measureStepPhases(
  engine: Engine,
  batch: number,
  promptTokens: number,
  tokens: number,
  seed: number,
): Promise<StepPhases> {
  // The edge kernels have no ONNX session: their forward is the model pass itself.
  const session = (engine.runner as unknown as { session?: OrtSession }).session;
  const original = { step: engine.step, forward: engine.runner.forward, run: session?.run };
  const rows: { start: number; step: number; forward: number; model: number; batchTokens: number }[] = [];
  let current = { forward: 0, model: 0 };
  engine.step = async function (this: Engine, lane?: number) {
    const start = performance.now();
    current = { forward: 0, model: 0 };
    const ran = await original.step.call(engine, lane);
    const s = engine.stats();
    rows.push({ start, step: performance.now() - start, ...current, batchTokens: s.lastStepTokens });
    return ran;
  };
  engine.runner.forward = async (...args: Parameters<typeof original.forward>) => {
    const t0 = performance.now();
    const out = await original.forward.apply(engine.runner, args);
    current.forward += performance.now() - t0;
    if (!session) current.model += performance.now() - t0;
    return out;
  };
  if (session)
    session.run = (async (...args: Parameters<OrtSession['run']>) => {
      const t0 = performance.now();
      const out = await (original.run as (...a: unknown[]) => ReturnType<OrtSession['run']>).apply(session, args);
      current.model += performance.now() - t0;
      return out;
    }) as OrtSession['run'];
  try {
    await engineDecode(engine, batch, promptTokens, tokens, seed);
  } finally {
    engine.step = original.step;
    engine.runner.forward = original.forward;
    if (session) session.run = original.run!;
  }
  // Steady decode steps only: every sequence decoding one token, and a following step to end the period.
  const decode: { period: number; step: number; forward: number; model: number }[] = [];
  for (let i = 0; i + 1 < rows.length; i++) {
    const r = rows[i];
    if (r.batchTokens !== batch || r.model === 0) continue;
    decode.push({ period: rows[i + 1].start - r.start, step: r.step, forward: r.forward, model: r.model });
  }
  const periodMs = median(decode.map((d) => d.period));
  const modelMs = median(decode.map((d) => d.model));
  return {
    periodMs,
    modelMs,
    gatherScatterMs: median(decode.map((d) => d.forward - d.model)),
    engineMs: median(decode.map((d) => d.step - d.forward)),
    loopMs: median(decode.map((d) => d.period - d.step)),
    outsideShare: median(decode.map((d) => (d.period - d.model) / d.period)),
    steps: decode.length,
  };
}
