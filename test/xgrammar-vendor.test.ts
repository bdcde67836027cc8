// The vendored xgrammar (src/engine/constraints/xgrammar/) is exactly what scripts/xgrammar-vendor.ts makes
// from the installed @mlc-ai/web-xgrammar: a version bump without regenerating fails here.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { vendorXgrammar } from '../scripts/xgrammar-vendor.js';

describe('vendored xgrammar', () => {
  it('matches the installed package', () => {
    const { glue, wasm } = vendorXgrammar();
    const dir = new URL('../src/engine/constraints/xgrammar/', import.meta.url);
    expect(readFileSync(new URL('xgrammar-glue.js', dir), 'utf8')).toBe(glue);
    expect(Buffer.compare(readFileSync(new URL('xgrammar.wasm', dir)), Buffer.from(wasm))).toBe(0);
    // No wasm bytes left in the glue (workerd could not compile them, and they would double the bundle).
    expect(glue).not.toContain('data:application/octet-stream;base64,A');
    expect(glue.length).toBeLessThan(200_000);
  });
});
