#!/usr/bin/env bash
# Builds the edge kernels (kernels/*.c) four times with Debian's clang-16 and lld-16, into src/engine/runners/wasm/:
#   edge-kernels.wasm          WebAssembly SIMD (simd128): runs everywhere
#   edge-kernels-relaxed.wasm  the same sources with relaxed SIMD's i8 dot product as int16 pairs (-DRELAXED):
#                              the same bits; Node 20's V8 runs it fastest
#   edge-kernels-relaxed-wide.wasm  relaxed, a single row's tile 16 columns wide for the forms stored by column
#                              (-DWIDE_ROWS): the same bits; fewer loads, each bounds-checked in workerd's V8 (the
#                              worker runs it where it does not run dot-add)
#   edge-kernels-dot-add.wasm  relaxed and wide, the dot product accumulating in int32 (-DDOT_ADD): the same bits
#                              where V8 fuses it (one vpdpbusd: workerd's on an AVX-VNNI host, which alone runs it);
#                              its 8-bit products rely on that instruction reading values past 127 as unsigned
# The .wasm files are committed: `npm start` and `npm test` need no compiler; CI rebuilds them and fails if
# a result differs from the committed file (test/kernels-build.test.ts).
#   bash kernels/build.sh [out-dir]
set -euo pipefail
for a in "$@"; do
  if [ "$a" = --help ] || [ "$a" = -h ]; then
    echo "Usage: npm run kernels:build [-- out-dir]"
    echo "Builds kernels/*.c with clang-16 and lld-16 into edge-kernels.wasm, edge-kernels-relaxed.wasm,"
    echo "edge-kernels-relaxed-wide.wasm and edge-kernels-dot-add.wasm"
    echo "(default out-dir: src/engine/runners/wasm). Needs: apt-get install clang-16 lld-16"
    exit 0
  fi
done
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../src/engine/runners/wasm}"
cc=clang-16
command -v "$cc" >/dev/null || { echo "kernels/build.sh needs clang-16 and lld-16 (apt-get install clang-16 lld-16)" >&2; exit 1; }
# -ffp-contract=off: no fused multiply-add, so every product is rounded as the reference expects and
# the same source gives the same bits on every engine. Memory is imported: the host sizes it once.
build() {
  "$cc" --target=wasm32 -O3 -msimd128 "$@" -ffreestanding -nostdlib -ffp-contract=off -fno-builtin-memset \
    -Wall -Wextra -Werror -Wno-unused-parameter \
    -Wl,--no-entry -Wl,--import-memory -Wl,--export=__heap_base -Wl,-z,stack-size=131072 -Wl,--strip-all \
    "$here"/elementwise.c "$here"/matmul_float.c "$here"/matmul_quant.c "$here"/attention.c "$here"/attention_i8.c "$here"/repack.c
}
build -o "$out/edge-kernels.wasm"
build -mrelaxed-simd -DRELAXED -o "$out/edge-kernels-relaxed.wasm"
build -mrelaxed-simd -DRELAXED -DWIDE_ROWS -o "$out/edge-kernels-relaxed-wide.wasm"
build -mrelaxed-simd -DRELAXED -DWIDE_ROWS -DDOT_ADD -o "$out/edge-kernels-dot-add.wasm"
