// The backport of workers-sdk#14243 to the wrangler we pin (scripts/lib/wrangler-inspector-patch.ts): wrangler
// dev's inspector proxy enables the Network domain only while DevTools is attached, so a MODEL_URL weights
// file does not flood it with one socket per 4 KiB (test/e2e/model-url.test.ts loads one through it).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ensureInspectorProxyPatched,
  inspectorProxyPath,
  patchInspectorProxy,
} from '../scripts/lib/wrangler-inspector-patch.js';

/** The two places the patch changes, as wrangler 4.86.0 ships them. */
const SHIPPED = `  handleRuntimeWebSocketOpen(runtime) {
    this.sendRuntimeMessage(
      { method: "Network.enable", id: this.nextCounter() },
      runtime
    );
    clearInterval(this.runtimeKeepAliveInterval);
  }
  handleDevToolsWebSocketUpgradeRequest(req) {
      const disconnectDevtools = () => {
        if (this.websockets.devtools === devtools) {
          this.websockets.devtools = void 0;
          if (this.websockets.runtime) {
            this.sendRuntimeMessage({
              id: this.nextCounter(),
              method: "Debugger.disable"
            });
          }
        }
      };
  }`;

describe('the inspector proxy patch', () => {
  it('gates Network.enable on an attached DevTools and disables Network when DevTools leaves', () => {
    const { source, outcome } = patchInspectorProxy(SHIPPED);
    expect(outcome).toBe('patched');
    expect(source).toMatch(
      /if \(this\.websockets\.devtools !== void 0\) \{\s*this\.sendRuntimeMessage\(\s*\{ method: "Network\.enable"/,
    );
    expect(source).toMatch(
      /method: "Debugger\.disable"\s*\}\);\s*this\.sendRuntimeMessage\(\{[^}]*method: "Network\.disable"/,
    );
    expect(patchInspectorProxy(source)).toEqual({ source, outcome: 'current' });
  });

  it('leaves a file of another shape alone and says so', () => {
    expect(patchInspectorProxy('export default {}')).toEqual({ source: 'export default {}', outcome: 'unknown' });
  });

  it('the installed wrangler is patched (or fixed upstream) once ensured', () => {
    expect(['patched', 'current']).toContain(ensureInspectorProxyPatched());
    expect(ensureInspectorProxyPatched()).toBe('current');
    const installed = readFileSync(inspectorProxyPath(), 'utf8');
    // Network.enable is sent only under the DevTools check, never unconditionally.
    const enables = installed.split('method: "Network.enable"').length - 1;
    expect(enables).toBe(1);
    expect(installed).toMatch(
      /devtools !== (void 0|undefined)\) \{\s*this\.sendRuntimeMessage\(\s*\{ method: "Network\.enable"/,
    );
  });
});
