#!/usr/bin/env bash
# gpu-kit/run.sh: the bench's gpu section (scripts/bench/gpu.ts, bundled: our WGSL pass, onnxruntime-web's
# WebGPU path and our WASM kernels side by side) on a machine with no network, no Node and no npm.
# Run as root from the directory holding gpu-kit/:   bash gpu-kit/run.sh
# Results go to $OUT (default ./gpu-kit-out): run.log, adapter.json, gpu.json, gpu.md, webgpu-*.json, summary.md and, when
# no adapter is found, vulkan-loader.txt. Every phase logs and the next one runs even if it fails.
#
# Knobs (environment):
#   KIT_BUDGET_S     seconds for the whole script (default 470); a phase that would not fit is skipped
#   KIT_GPU_ARGS     the gpu section's flags (default none: batch 1, 16, 64, prefill 512); "--big" adds bench-1b q4
#   KIT_WEBGPU_BENCH=1  also run the older onnxruntime-web-only bench (scripts/bench/webgpu.ts) afterwards
#   KIT_WORK         where node, the app and the models are unpacked (default /tmp/gpukit)
#   KIT_BENCH_MODEL  preset of the main and long benches (default bench-135m, SmolLM2-135M shapes, fp32)
#   KIT_LONG_MODEL   preset of the long-context bench (default KIT_BENCH_MODEL)
#   KIT_MAIN_ARGS    default "--runs 3 --batches 1,4,16 --prompt 64 --tokens 32"
#   KIT_LONG_ARGS    default "--runs 3 --batches 1 --prompt 512 --tokens 16"; "skip" skips it
#   KIT_FORCE=1      run the big benches even on a software (fallback) adapter
#   KIT_NO_SYSTEM_INSTALL=1  never write into /usr/lib: use LD_LIBRARY_PATH for the bundled GL/Vulkan libs
#   VK_DRIVER_FILES / VK_ICD_FILENAMES  used as given when set; otherwise the NVIDIA ICD is looked for
set -u -o pipefail

T0=$(date +%s)
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
OUT=${OUT:-$PWD/gpu-kit-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
LOG=$OUT/run.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

BUDGET=${KIT_BUDGET_S:-470}
GPU_ARGS=${KIT_GPU_ARGS:-}
W=${KIT_WORK:-/tmp/gpukit}
BENCH_MODEL=${KIT_BENCH_MODEL:-bench-135m}
LONG_MODEL=${KIT_LONG_MODEL:-$BENCH_MODEL}
MAIN_ARGS=${KIT_MAIN_ARGS:---runs 3 --batches 1,4,16 --prompt 64 --tokens 32}
LONG_ARGS=${KIT_LONG_ARGS:---runs 3 --batches 1 --prompt 512 --tokens 16}
NOISE='artificially reduced from|VerifyEachNodeIsAssignedToAnEp|Rerunning with verbose output'
export PATH="$PATH:/usr/local/nvidia/bin"

elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
say() { printf '[%(%H:%M:%S)T +%4ss] %s\n' -1 "$(elapsed)" "$*"; }
SUMMARY=()
PHASE=''
PHASE_T=0
phase() { PHASE=$1; PHASE_T=$(date +%s); say "==== phase: $PHASE"; }
done_phase() { # status
  local s=$(($(date +%s) - PHASE_T))
  say "==== $PHASE: $1 in ${s}s"
  SUMMARY+=("$(printf '%-34s %-10s %5ss' "$PHASE" "$1" "$s")")
}
# Runs a command with a timeout, time-stamping its lines and dropping known noise; returns its status.
run_timed() { # seconds cmd...
  local t=$1
  shift
  timeout -k 5 "$t" "$@" 2>&1 | while IFS= read -r line; do
    [[ $line =~ $NOISE ]] && continue
    printf '[%(%H:%M:%S)T]   %s\n' -1 "$line"
  done
  return "${PIPESTATUS[0]}"
}

# .xz and .deb without xz or dpkg: Python's lzma and tarfile (also when the tool is there but fails).
unxz_to() { # file.xz dest
  { command -v xz >/dev/null && xz -dc "$1" >"$2"; } ||
    python3 -W ignore -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2"
}
untar_xz() { # file.tar.xz dir
  { command -v xz >/dev/null && tar -xJf "$1" -C "$2"; } ||
    python3 -W ignore -c 'import tarfile,sys; tarfile.open(sys.argv[1],"r:xz").extractall(sys.argv[2])' "$1" "$2"
}
undeb() { # file.deb dir: its data.tar.* member
  { command -v dpkg-deb >/dev/null && dpkg-deb -x "$1" "$2"; } || python3 -W ignore - "$1" "$2" <<'PY'
import io, sys, tarfile
d = open(sys.argv[1], 'rb').read(); pos = 8
while pos < len(d):
    name = d[pos:pos + 16].decode().strip().rstrip('/'); size = int(d[pos + 48:pos + 58])
    if name.startswith('data.tar'):
        tarfile.open(fileobj=io.BytesIO(d[pos + 60:pos + 60 + size])).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
PY
}

say "gpu-kit: WebGPU bench kit; log $LOG; budget ${BUDGET}s; kit $KIT; work $W"
say "host: $(uname -srm); $(nproc) cpus; $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"); glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)"
say "NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES:-<unset>} NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-<unset>}"

# ---------------------------------------------------------------------------------------------------------
phase unpack
rm -rf "$W" && mkdir -p "$W/bin" "$W/models" && W=$(cd "$W" && pwd -P)
NODE=$W/bin/node
ok=1
unxz_to "$KIT/node.xz" "$NODE" && chmod +x "$NODE" || ok=0
untar_xz "$KIT/app.tar.xz" "$W" || ok=0
APP=$W/app
if [ $ok = 1 ] && "$NODE" --version >/dev/null 2>&1; then
  say "node $("$NODE" --version) at $NODE (the kit's own; a node on PATH: $(node --version 2>/dev/null || echo none usable))"
  done_phase ok
else
  say "FATAL: could not unpack node or the app"; done_phase FAILED
  printf '%s\n' "${SUMMARY[@]}"; exit 1
fi

# ---------------------------------------------------------------------------------------------------------
phase gl-libs
SYS=$W/sys
mkdir -p "$SYS"
for f in "$KIT"/gl/*.deb; do undeb "$f" "$SYS" || say "could not unpack $(basename "$f")"; done
LIBDIR=$SYS/usr/lib/x86_64-linux-gnu
SYSLIB=/usr/lib/x86_64-linux-gnu
added=()
if [ "${KIT_NO_SYSTEM_INSTALL:-0}" != 1 ] && [ -d "$SYSLIB" ] && [ -w "$SYSLIB" ]; then
  # Only libraries (sonames) the system lacks, never replacing its own copies; then ldconfig.
  have=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for link in "$LIBDIR"/*.so.*; do
    [ -L "$link" ] || continue
    so=$(basename "$link")
    if grep -qxF "$so" <<<"$have" || [ -e "$SYSLIB/$so" ]; then continue; fi
    cp -a "$LIBDIR/$(readlink "$link")" "$SYSLIB/" && cp -a "$link" "$SYSLIB/" && added+=("$so")
  done
  ldconfig 2>/dev/null || export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$LIBDIR"
  say "added to $SYSLIB: ${added[*]:-nothing (the system has them all)}"
else
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$LIBDIR"
  say "bundled libs via LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi
for so in libvulkan.so.1 libGLdispatch.so.0 libEGL.so.1 libX11.so.6 libXext.so.6; do
  p=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1==s{print $NF; exit}')
  [ -z "$p" ] && [ -e "$LIBDIR/$so" ] && case ":${LD_LIBRARY_PATH:-}:" in *":$LIBDIR:"*) p="$LIBDIR/$so" ;; esac
  say "  $so -> ${p:-MISSING}"
done
done_phase ok

# ---------------------------------------------------------------------------------------------------------
phase gpu-and-vulkan-driver
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>&1 | sed 's/^/  /'
  nvidia-smi --query-gpu=name,driver_version,memory.total,pstate,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/  /'
else
  say "nvidia-smi: not found"
fi
ls -l /dev/nvidia* /dev/dri 2>/dev/null | awk '{print "  " $0}' | head -12
GLX=$(ldconfig -p 2>/dev/null | awk '$1=="libGLX_nvidia.so.0"{print $NF; exit}')
[ -z "$GLX" ] && GLX=$(timeout 20 find /usr/local/nvidia /usr/lib /usr/lib64 /lib /opt -name 'libGLX_nvidia.so.0' 2>/dev/null | head -1)
EGLNV=''
if [ -n "$GLX" ]; then
  GLXDIR=$(dirname "$GLX")
  EGLNV=$(ls "$GLXDIR"/libEGL_nvidia.so.0 2>/dev/null)
  say "libGLX_nvidia.so.0 (the NVIDIA Vulkan driver): $GLX -> $(readlink -f "$GLX")"
  if ! ldconfig -p 2>/dev/null | grep -q 'libGLX_nvidia.so.0 '; then
    export LD_LIBRARY_PATH="$GLXDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "  not in the linker cache: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  fi
  miss=$(ldd "$GLX" 2>&1 | grep 'not found' | tr -s ' \t' ' ')
  say "  its missing dependencies: ${miss:-none}"
  say "  driver libraries beside it: $(ls "$GLXDIR" 2>/dev/null | grep -E '^lib(nvidia-(glvkspirv|glcore|eglcore|glsi|gpucomp)|EGL_nvidia|GLX_nvidia|cuda)\.so' | tr '\n' ' ')"
else
  say "libGLX_nvidia.so.0 not found: no NVIDIA graphics/Vulkan user-space driver in this container (it comes with NVIDIA_DRIVER_CAPABILITIES graphics or all); Dawn will find no NVIDIA adapter"
fi
write_icd() { # library json
  printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$1" >"$2"
}
if [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  say "Vulkan ICD given by the caller: VK_DRIVER_FILES=${VK_DRIVER_FILES:-} VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-}"
else
  ICD=''
  for d in /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d /usr/local/etc/vulkan/icd.d; do
    for f in "$d"/nvidia_icd*.json; do [ -f "$f" ] && { ICD=$f; break 2; }; done
  done
  if [ -n "$ICD" ]; then
    say "NVIDIA Vulkan ICD manifest in a standard place (the loader finds it): $ICD"
  else
    for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/etc/vulkan/icd.d/nvidia_icd.json; do
      [ -f "$f" ] && { ICD=$f; break; }
    done
    [ -z "$ICD" ] && ICD=$(timeout 20 find /usr/local/nvidia /usr/share /usr/lib /etc /opt -name 'nvidia_icd*.json' 2>/dev/null | head -1)
    if [ -z "$ICD" ] && [ -n "$GLX" ]; then
      ICD=$W/nvidia_icd.json
      write_icd "$GLX" "$ICD"
      say "no NVIDIA ICD manifest anywhere: wrote $ICD for $GLX"
    fi
    if [ -n "$ICD" ]; then
      export VK_DRIVER_FILES=$ICD VK_ICD_FILENAMES=$ICD
      say "VK_DRIVER_FILES=$ICD"
    else
      say "no NVIDIA Vulkan ICD manifest found"
    fi
  fi
  [ -n "$ICD" ] && sed 's/^/    /' "$ICD"
fi
done_phase ok

# ---------------------------------------------------------------------------------------------------------
phase adapter
ADAPTER_OK=0
probe() { run_timed 60 "$NODE" "$APP/probe.mjs" "$OUT/adapter.json"; }
if probe; then ADAPTER_OK=1; fi
if [ $ADAPTER_OK = 0 ]; then
  say "no adapter: Vulkan loader messages go to $OUT/vulkan-loader.txt"
  VK_LOADER_DEBUG=error,warn,driver timeout 60 "$NODE" "$APP/probe.mjs" >"$OUT/vulkan-loader.txt" 2>&1
  grep -iE 'error|warn|fail|not found|cannot' "$OUT/vulkan-loader.txt" | head -25 | sed 's/^/    /'
  # The NVIDIA driver also exports its Vulkan entry points from libEGL_nvidia.so.0, which needs no X11 libraries.
  for lib in "$GLX" "$EGLNV"; do
    [ -z "$lib" ] && continue
    alt=$W/icd-$(basename "$lib" .so.0).json
    write_icd "$lib" "$alt"
    say "retrying with an ICD manifest naming $lib"
    if VK_DRIVER_FILES=$alt VK_ICD_FILENAMES=$alt probe; then
      export VK_DRIVER_FILES=$alt VK_ICD_FILENAMES=$alt
      ADAPTER_OK=1
      break
    fi
  done
fi
SOFTWARE=0
if [ $ADAPTER_OK = 1 ]; then
  SOFTWARE=$("$NODE" -e 'const a=require(process.argv[1]).info||{};const s=a.isFallbackAdapter||a.architecture==="software"||/llvmpipe|lavapipe|swiftshader/i.test(`${a.device} ${a.description}`);console.log(s?1:0)' "$OUT/adapter.json" 2>/dev/null || echo 0)
  [ "$SOFTWARE" = 1 ] && say "the adapter is a software one (CPU), not the GPU"
  done_phase ok
else
  done_phase FAILED
fi

# ---------------------------------------------------------------------------------------------------------
phase generate-models
gen() { # preset
  local t=$(date +%s)
  if run_timed 120 "$NODE" "$APP/model-make.mjs" --preset "$1" --out "$W/models/$1"; then
    say "  $1: $(du -sh "$W/models/$1" | cut -f1) in $(($(date +%s) - t))s"
  else
    say "  $1: FAILED"; return 1
  fi
}
GEN_OK=ok
if [ "${KIT_WEBGPU_BENCH:-0}" = 1 ]; then
  for p in $(printf '%s\n' tiny bench-135m "$BENCH_MODEL" "$LONG_MODEL" | awk '!seen[$0]++'); do gen "$p" || GEN_OK=FAILED; done
else
  say "  the gpu section makes its own; the older benches' models only with KIT_WEBGPU_BENCH=1"
fi
say "  (the bench reads onnx/model.onnx, fp32, only; see README.txt on fp16)"
done_phase $GEN_OK

# ---------------------------------------------------------------------------------------------------------
bench() { # name need_s cap_s preset args...
  local name=$1 need=$2 cap=$3 preset=$4
  shift 4
  phase "bench $name"
  if [ $ADAPTER_OK = 0 ]; then say "skipped: no WebGPU adapter"; done_phase skipped; return; fi
  if [ ! -f "$W/models/$preset/onnx/model.onnx" ]; then say "skipped: no model $preset"; done_phase skipped; return; fi
  local l
  l=$(left)
  if [ "$l" -lt "$need" ]; then say "skipped: ${l}s of the budget left, this needs about ${need}s"; done_phase skipped; return; fi
  [ "$cap" -gt $((l - 10)) ] && cap=$((l - 10))
  local json=$OUT/webgpu-$name.json
  say "node --liftoff-only webgpu-bench.mjs --model models/$preset $* (timeout ${cap}s)"
  run_timed "$cap" "$NODE" --liftoff-only "$APP/src/backends/webgpu-bench.mjs" --model "$W/models/$preset" "$@" --json "$json"
  local rc=$?
  if [ $rc = 0 ] && [ -s "$json" ]; then done_phase ok
  elif [ $rc = 124 ] || [ $rc = 137 ]; then say "timed out after ${cap}s: the per-run lines above are what there is"; done_phase TIMEOUT
  else say "exit $rc$([ -s "$json" ] || echo ', no JSON written')"; done_phase FAILED; fi
}

# ---------------------------------------------------------------------------------------------------------
# The gpu section makes its own models (app/.bench/models) and labels a software adapter's rows itself
# ("lavapipe, correctness only"); without an adapter it runs the kernels only.
phase "gpu section"
l=$(left)
say "node gpu-bench.mjs $GPU_ARGS (timeout $((l - 20))s)"
# shellcheck disable=SC2086
run_timed $((l - 20)) "$NODE" "$APP/src/backends/gpu-bench.mjs" $GPU_ARGS --json "$OUT/gpu.json" | tee "$OUT/gpu.md"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then done_phase ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then done_phase TIMEOUT; else done_phase FAILED; fi

if [ "${KIT_WEBGPU_BENCH:-0}" != 1 ]; then
  say "the older onnxruntime-web-only benches are skipped (KIT_WEBGPU_BENCH=1 runs them)"
else
bench tiny-smoke 20 90 tiny --runs 1 --batches 1
if [ "$SOFTWARE" = 1 ] && [ "${KIT_FORCE:-0}" != 1 ]; then
  say "software adapter: the $BENCH_MODEL benches are skipped (KIT_FORCE=1 runs them anyway)"
else
  # shellcheck disable=SC2086
  bench "$BENCH_MODEL" 90 330 "$BENCH_MODEL" $MAIN_ARGS
  if [ "$LONG_ARGS" != skip ]; then
    # Decode after a 512-token prompt: each step attends (and, KV on device, gathers) 512+ positions. The
    # prompt itself is run once per path and batch, untimed.
    # shellcheck disable=SC2086
    bench "$LONG_MODEL-long" 90 200 "$LONG_MODEL" $LONG_ARGS
  fi
fi
fi

# ---------------------------------------------------------------------------------------------------------
phase onnxruntime-node-cuda
say "skipped: onnxruntime-node's CUDA provider (libonnxruntime_providers_cuda.so) is not in the kit: the repo's"
say "node_modules has only the CPU build (package.json allowScripts disables onnxruntime-node's install script,"
say "which is what downloads the CUDA binaries), and there is no network here to fetch them"
done_phase skipped

# ---------------------------------------------------------------------------------------------------------
phase summary
printf '%s\n' "${SUMMARY[@]}" >"$W/phases.txt"
"$NODE" "$APP/summary.mjs" "$OUT" "$W/phases.txt" >"$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
done_phase ok
say "phases:"
printf '  %s\n' "${SUMMARY[@]}"
say "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
say "total $(elapsed)s"
