import { ensureModels } from '../scripts/ensure-models.js';

// Runs once, in Node, before any test file: the generated models the tests read.
export default function setup(): void {
  ensureModels();
}
