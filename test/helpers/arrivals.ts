import type { Engine } from '../../src/engine/engine.js';
import type { GenerationRequest } from '../../src/engine/request.js';
import type { DoneEvent, TokenEvent } from '../../src/engine/sequence-output.js';
import { collect } from './engines.js';

export interface Arrival {
  request: GenerationRequest;
  /** Step before which the request is submitted. */
  at: number;
  /** Step before which its client goes away. */
  cancelAt?: number;
}

export type Result = { tokens: TokenEvent[]; done: DoneEvent };

/** Steps a manual engine, submitting and cancelling requests at the given steps, until all are done. */
export async function runArrivals(
  engine: Engine,
  arrivals: Arrival[],
  onStep?: (step: number) => void,
): Promise<Result[]> {
  const results: Promise<Result>[] = [];
  const controllers: AbortController[] = [];
  const lastArrival = Math.max(...arrivals.map((a) => a.at));
  for (let step = 0; step <= lastArrival || engine.busy; step++) {
    arrivals.forEach((a, i) => {
      if (a.at === step) {
        controllers[i] = new AbortController();
        results[i] = collect(engine, a.request, controllers[i].signal);
      }
      if (a.cancelAt === step) controllers[i].abort();
    });
    await engine.step();
    onStep?.(step);
    await new Promise((resolve) => setImmediate(resolve)); // let the consumers read their events
    if (step > 10_000) throw new Error('engine did not finish');
  }
  return Promise.all(results);
}
