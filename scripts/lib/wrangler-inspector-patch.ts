// wrangler dev's inspector proxy (wrangler-dist/InspectorProxyWorker.js, a worker in wrangler's own workerd)
// turns on the Network domain of the user worker's inspector even when no DevTools is attached. workerd then
// sends a `Network.dataReceived` event for every 4 KiB a subrequest's body brings, and the proxy posts each
// event it receives to wrangler as a debug log, one fetch (one socket) per event, none awaited: a 94 MiB
// MODEL_URL file makes ~24,000 of them at once, the proxy's workerd runs out of file descriptors ("overloaded:
// ::socket(...): Too many open files"), each failure is itself posted as a debug log, and the load never
// ends. workers-sdk#14243 (wrangler releases after 4.86, which need Node 22) enables Network only while a
// DevTools client is attached and disables it when the client leaves; this applies that change to the
// wrangler we pin (4.86.0, the last on Node 20). Run before every `wrangler dev` we start; it is idempotent.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const ENABLE = `    this.sendRuntimeMessage(
      { method: "Network.enable", id: this.nextCounter() },
      runtime
    );
`;
const ENABLE_GATED = `    if (this.websockets.devtools !== void 0) {
      this.sendRuntimeMessage(
        { method: "Network.enable", id: this.nextCounter() },
        runtime
      );
    }
`;
const ON_LEAVE = `            this.sendRuntimeMessage({
              id: this.nextCounter(),
              method: "Debugger.disable"
            });
          }
        }
      };`;
const ON_LEAVE_DISABLING = `            this.sendRuntimeMessage({
              id: this.nextCounter(),
              method: "Debugger.disable"
            });
            this.sendRuntimeMessage({
              id: this.nextCounter(),
              method: "Network.disable"
            });
          }
        }
      };`;

/** `patched`: changed now; `current`: already gated (by us earlier, or a wrangler with the fix); `unknown`: neither shape. */
export type PatchOutcome = 'patched' | 'current' | 'unknown';

/** The proxy's source with Network enabled only while DevTools is attached, and disabled when it leaves. */
export function patchInspectorProxy(source: string): { source: string; outcome: PatchOutcome } {
  const gated =
    /if \(this\.websockets\.devtools !== (?:void 0|undefined)\) \{\s*this\.sendRuntimeMessage\(\s*\{\s*method: "Network\.enable"/;
  if (gated.test(source)) return { source, outcome: 'current' };
  if (source.split(ENABLE).length !== 2 || source.split(ON_LEAVE).length !== 2) return { source, outcome: 'unknown' };
  return { source: source.replace(ENABLE, ENABLE_GATED).replace(ON_LEAVE, ON_LEAVE_DISABLING), outcome: 'patched' };
}

/** The installed wrangler's inspector proxy script. */
export function inspectorProxyPath(): string {
  const wrangler = createRequire(import.meta.url).resolve('wrangler/package.json');
  return join(dirname(wrangler), 'wrangler-dist', 'InspectorProxyWorker.js');
}

/** Applies the patch to the installed wrangler; warns (does not fail) when the file has an unknown shape. */
export function ensureInspectorProxyPatched(path = inspectorProxyPath()): PatchOutcome {
  const { source, outcome } = patchInspectorProxy(readFileSync(path, 'utf8'));
  if (outcome === 'patched') writeFileSync(path, source);
  if (outcome === 'unknown')
    console.error(
      `edge-infer: ${path} is not the inspector proxy this repo patches (workers-sdk#14243); a MODEL_URL file of ` +
        'tens of MiB may flood wrangler dev with sockets (docs/platform.md, "MODEL_URL in wrangler dev")',
    );
  return outcome;
}
