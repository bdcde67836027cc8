// Pipeline stages named for their head (issue 44, finding 6): the generated head config says which pipeline it
// is and binds stage scripts named for the run; the stage object a head shard reaches is named for the head, its
// model and the shard, so no two of them meet in one object. (Two real pipelines: test/e2e/pipeline-heads.test.ts.)
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { headConfig, stageConfig } from '../scripts/lib/stage-configs.js';
import { stageObjectName } from '../src/objects/stage-links.js';

const toml = readFileSync(new URL('../wrangler.toml', import.meta.url), 'utf8');

describe('pipeline stage naming', () => {
  it("writes the head's pipeline name and binds the run's own stage scripts", () => {
    const tagged = headConfig(toml, 2, 's123');
    expect(tagged).toContain('PIPELINE_HEAD = "edge-infer-s123"');
    expect(tagged).toContain('script_name = "edge-infer-s123-stage-1"');
    expect(tagged).toContain('script_name = "edge-infer-s123-stage-2"');
    expect(stageConfig(toml, 2, {}, 's123')).toMatch(/^name = "edge-infer-s123-stage-2"/m);
    // A deploy has no tag: the head is its script.
    expect(headConfig(toml, 1)).toContain('PIPELINE_HEAD = "edge-infer"');
  });

  it('names a different stage object for another head, model or shard', () => {
    const names = [
      stageObjectName('edge-infer', 'tiny', 'abc'),
      stageObjectName('edge-infer-s123', 'tiny', 'abc'),
      stageObjectName('edge-infer', 'tiny-copy', 'abc'),
      stageObjectName('edge-infer', 'tiny', 'abd'),
      // No separator can make two of them one: 'a/b' + 'c' is not 'a' + 'b/c'.
      stageObjectName('edge-infer/x', 'tiny', 'abc'),
      stageObjectName('edge-infer', 'x/tiny', 'abc'),
    ];
    expect(new Set(names).size).toBe(names.length);
  });
});
