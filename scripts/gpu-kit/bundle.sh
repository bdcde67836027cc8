#!/usr/bin/env bash
# The kit's app folder: bash bundle.sh CHECKOUT APP_DIR (run on the development machine after npm ci).
# esbuild bundles of the gpu bench section (scripts/bench/gpu.ts), the older WebGPU bench and the model
# generator, with the files they open at run time and the node_modules they load. Needs no network.
set -euo pipefail
M=$(cd "${1:?usage: bundle.sh CHECKOUT APP_DIR}" && pwd)
A=${2:?usage: bundle.sh CHECKOUT APP_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$A"
EXT=(--external:webgpu --external:onnxruntime-web --external:onnxruntime-web/webgpu --external:onnxruntime-common
  --external:onnxruntime-node '--external:*.node' '--external:*.wasm')
ESB=(--bundle --platform=node --format=esm --target=node20 --log-level=warning
  "--banner:js=import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);")
# The benches sit where src/backends/ is (two folders deep, like scripts/bench/), so their import.meta.url
# lookups (../../shaders, ../engine/runners/wasm/*.wasm, ../../.bench/models, createRequire's node_modules) hold.
for entry in gpu webgpu; do
  (cd "$M" && node_modules/.bin/esbuild "scripts/bench/$entry.ts" "${ESB[@]}" "${EXT[@]}" \
    --outfile="$A/src/backends/$entry-bench.mjs")
  # One bundle shares one import.meta.url: the bundled scripts' own "run as main" checks (model-make's and
  # others', spelled with pathToFileURL) would all fire; only the entry's (spelled file://) stays.
  sed -i -E 's/import\.meta\.url === pathToFileURL[0-9]*\(process\.argv\[1\] \?\? ""\)\.href/false/' \
    "$A/src/backends/$entry-bench.mjs"
done
(cd "$M" && node_modules/.bin/esbuild scripts/model-make.ts "${ESB[@]}" "${EXT[@]}" --outfile="$A/model-make.mjs")
# The tokenizer builder reads ./corpus.txt beside the bundle that holds it.
cp "$M/scripts/tokenizer/corpus.txt" "$A/"
cp "$M/scripts/tokenizer/corpus.txt" "$A/src/backends/"
mkdir -p "$A/shaders" "$A/src/engine/runners/wasm" "$A/src/engine/constraints/xgrammar"
cp "$M"/shaders/*.wgsl "$A/shaders/"
cp "$M"/src/engine/runners/wasm/edge-kernels{,-relaxed}.wasm "$A/src/engine/runners/wasm/"
cp "$M/src/engine/constraints/xgrammar/xgrammar.wasm" "$A/src/engine/constraints/xgrammar/"
N=$A/node_modules
mkdir -p "$N/webgpu/dist/linux-x64" "$N/onnxruntime-web/dist" "$N/onnxruntime-common/dist/esm"
cp "$M"/node_modules/webgpu/{package.json,index.js,LICENSE.md} "$N/webgpu/"
cp "$M/node_modules/webgpu/dist/linux-x64/dawn.node" "$N/webgpu/dist/linux-x64/"
cp "$M/node_modules/onnxruntime-web/package.json" "$N/onnxruntime-web/"
# What the benches open (strace): ort.node.min.mjs + ort-wasm-simd-threaded.{mjs,wasm} for wasm, ort.webgpu.bundle.min.mjs
# + ort-wasm-simd-threaded.asyncify.{mjs,wasm} for WebGPU; ort.node.min.js only for require.resolve('onnxruntime-web').
for f in ort.node.min.mjs ort.node.min.js ort.webgpu.bundle.min.mjs ort-wasm-simd-threaded.mjs ort-wasm-simd-threaded.wasm \
  ort-wasm-simd-threaded.asyncify.mjs ort-wasm-simd-threaded.asyncify.wasm; do
  cp "$M/node_modules/onnxruntime-web/dist/$f" "$N/onnxruntime-web/dist/"
done
cp "$M/node_modules/onnxruntime-common/package.json" "$N/onnxruntime-common/"
(cd "$M/node_modules/onnxruntime-common/dist/esm" && find . -name '*.js' -o -name package.json | while read -r f; do
  mkdir -p "$N/onnxruntime-common/dist/esm/$(dirname "$f")" && cp "$f" "$N/onnxruntime-common/dist/esm/$f"; done)
# esbuild hoists the external onnxruntime-node (the `cpu` backend, imported lazily and never used by the kit) to a
# static import: an empty package stands in so the bundles load; the kit runs wasm, kernels and WebGPU only.
mkdir -p "$N/onnxruntime-node"
printf '{"name":"onnxruntime-node","type":"module","main":"index.js"}\n' >"$N/onnxruntime-node/package.json"
printf 'export {};\n' >"$N/onnxruntime-node/index.js"
cp "$HERE/probe.mjs" "$HERE/summary.mjs" "$A/"
