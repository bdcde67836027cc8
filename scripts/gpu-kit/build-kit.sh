#!/usr/bin/env bash
# Builds the GPU kit from a checkout (run where the checkout is, not on the GPU machine): bash build-kit.sh CHECKOUT KIT_DIR
# Needs the repo with node_modules (npm ci), /usr/bin/node (20.x), xz, strip, apt-get (Debian bookworm amd64).
set -euo pipefail
M=${1:?usage: build-kit.sh PROJECT_CHECKOUT [KIT_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
KIT=${2:?usage: build-kit.sh PROJECT_CHECKOUT KIT_DIR (a folder outside git: the kit holds ~33 MiB of binaries)}
mkdir -p "$KIT"; KIT=$(cd "$KIT" && pwd)
B=$(mktemp -d /tmp/gpukit-build.XXXX)
A=$B/app
bash "$HERE/bundle.sh" "$M" "$A"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=2026-01-01 -C "$B" -cf - app | xz -9e -T1 >"$KIT/app.tar.xz"
strip -o "$B/node" /usr/bin/node
xz -9e -T1 -c "$B/node" >"$KIT/node.xz"
mkdir -p /tmp/amd64/partial "$KIT/gl"
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
# The machine's own apt sources (as .ci/system-packages reads them): no host is named here.
apt-get "${o[@]}" update
(cd "$KIT/gl" && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 \
  libx11-6 libxext6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0)
rm -rf "$B"
cp "$HERE/run.sh" "$HERE/dispatch.mjs" "$KIT/"
du -sh "$KIT"
