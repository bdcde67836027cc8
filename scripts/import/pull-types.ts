// What a hub pull is and what it gives, apart from pull.ts, so each format's puller (pull-*.ts) names them
// without importing the module that imports it.
import type { HubOptions, Sibling } from './hub-client.js';

export type RepoFormat = 'onnx' | 'safetensors' | 'gguf';
export const REPO_FORMATS: readonly RepoFormat[] = ['onnx', 'safetensors', 'gguf'];

export interface PullOptions extends HubOptions {
  repo: string;
  revision?: string;
  /** ONNX repos: the graphs to fetch (onnx/model_q4.onnx ...). */
  files?: string[];
  /** safetensors repos: the dtypes to convert to (default q4); ONNX repos: the onnx/model_<dtype>.onnx to fetch. */
  dtypes?: string[];
  /** Pull the repo as this format when it holds several. */
  format?: RepoFormat;
  outDir: string;
  /** Told when a pull moves on to work other than downloading (a conversion). */
  onStage?: (message: string) => void;
}

export interface PullResult {
  sha: string;
  format: RepoFormat;
  /** what was fetched from the hub */
  files: { file: string; bytes: number; status: 'downloaded' | 'present' }[];
  /** what a conversion wrote into the folder (safetensors), relative to it */
  written: { file: string; bytes: number }[];
  /** MODEL_DTYPE of each graph the folder now holds (model_q4.onnx -> q4, model.onnx -> fp32) */
  dtypes: string[];
  weightBytes: number;
  kvBytesPerToken: number;
}

/** One pull in progress: the repo's listing at its commit, and a fetch that records what it got. */
export interface RepoPull {
  opts: PullOptions;
  revision: string;
  sha: string;
  byName: ReadonlyMap<string, Sibling>;
  result: PullResult;
  /** Downloads `file` into `dir` (same relative path), verified; throws when the repo lacks it. */
  fetch(file: string, dir: string): Promise<void>;
}

export type Puller = (pull: RepoPull) => Promise<PullResult>;
