import { IsolateModels } from '../isolate-models.js';
import type { StageModel } from './stage-server.js';

/** The isolate's pipeline stages' weights: module scope, shared by every stage object of the Worker script here. */
export const isolateStages = new IsolateModels<StageModel>();
