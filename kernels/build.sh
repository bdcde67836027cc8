#!/usr/bin/env bash
# Builds the edge kernels (kernels/*.c) into src/engine/kernels/edge-kernels.wasm with Debian's clang and
# lld. The .wasm is committed: `npm start` and `npm test` need no compiler; CI rebuilds it and fails if
# the result differs from the committed file (test/kernels-build.test.ts).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../src/engine/kernels/edge-kernels.wasm}"
# -ffp-contract=off: no fused multiply-add, so every product is rounded as the reference expects and
# the same source gives the same bits on every engine. Memory is imported: the host sizes it once.
clang --target=wasm32 -O3 -msimd128 -ffreestanding -nostdlib -ffp-contract=off -fno-builtin-memset \
  -Wall -Wextra -Werror -Wno-unused-parameter \
  -Wl,--no-entry -Wl,--import-memory -Wl,--export=__heap_base -Wl,-z,stack-size=65536 -Wl,--strip-all \
  -o "$out" "$here"/elementwise.c "$here"/matmul_float.c "$here"/matmul_quant.c "$here"/attention.c
