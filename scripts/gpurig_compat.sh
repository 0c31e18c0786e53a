#!/usr/bin/env bash
# Build a gpurig "compat" bundle: the Python of an SGLang release that pins a newer torch than the
# GPU machine's (0.5.18+ pin torch 2.13+; the machine has 2.11 and no network), to run on that
# torch 2.11 with an sglang-kernel built for it (issue 53, route 2; docs/gpu-newer-releases.md says
# what differs from a user's install). Reuses ../shared/gpurig/build.sh unchanged: a scratch copy of
# the shared rig gets this repo's gpurig/releases/*.txt and gpurig/stubs-extra/* laid over its own,
# build.sh runs from there; then the release file's "#kernel" and "#drop" lines are applied and the
# sglang wheel is slimmed (scripts/rig/slim_sglang.py) so bundle + checkout fit one device call.
# usage: RELEASE=0.5.18 bash scripts/gpurig_compat.sh [DEST] [EXTRA_WHEEL_SPEC ...]
#   DEST default: ./.gpurig-$RELEASE (add it to .git/info/exclude; never commit it)
#   GPURIG: the shared rig (default: ../shared/gpurig beside the checkout)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPURIG=${GPURIG:-$REPO/../shared/gpurig}
export RELEASE=${RELEASE:-0.5.18}
DEST=${1:-$REPO/.gpurig-$RELEASE}; shift || true
[ -f "$REPO/gpurig/releases/$RELEASE.txt" ] || { echo "no gpurig/releases/$RELEASE.txt in this repo; add the release's pins there first"; exit 2; }
[ -f "$GPURIG/build.sh" ] || { echo "no shared rig at $GPURIG; set GPURIG=/path/to/shared/gpurig"; exit 2; }
name=/$(basename "$DEST")/
[ "$(dirname "$DEST")" != "$REPO" ] || grep -qxF "$name" "$REPO/.git/info/exclude" 2>/dev/null \
  || echo "$name" >> "$REPO/.git/info/exclude"
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
cp -rL "$GPURIG"/. "$overlay"/
cp "$REPO"/gpurig/releases/*.txt "$overlay/releases/"
[ -d "$REPO/gpurig/stubs-extra" ] && cp -r "$REPO"/gpurig/stubs-extra/. "$overlay/stubs-extra/"
(cd "$REPO" && bash "$overlay/build.sh" "$DEST" "$@")
# "#kernel X" in the releases file: carry sglang-kernel X (slimmed the same way) instead of the
# release's own pin, when that pin was built against a newer torch than the GPU machine's
kernel=$(sed -n 's/^#kernel //p' "$REPO/gpurig/releases/$RELEASE.txt")
if [ -n "$kernel" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp" "sglang-kernel==$kernel"
  rm -f "$DEST"/whl/sglang_kernel-*.whl
  python3 "$GPURIG/tools/slim_sgl_kernel.py" "$tmp"/sglang_kernel-"$kernel"-*.whl "$DEST/whl"
  rm -rf "$tmp"
  # the release's engine refuses to start under a kernel older than its pin (0.5.18: "sglang-kernel
  # ... less than the minimum required version 0.4.6.post1"); its own switch skips that check
  echo 'export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1  # compat bundle: sglang-kernel older than the pin' \
    >> "$DEST/scripts/env.sh"
fi
# "#strip NAME": wheel NAME without static libraries, headers and symbols (scripts/rig/strip_native.py)
for n in $(sed -n 's/^#strip //p' "$REPO/gpurig/releases/$RELEASE.txt"); do
  PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" python3 -m scripts.rig.strip_native "$DEST"/whl/"$n"-*.whl
done
# "#drop PREFIX": more sglang wheel members no text-model engine loads (e.g. 0.5.23's opt-in Rust server)
drops=$(sed -n 's/^#drop /--drop /p' "$REPO/gpurig/releases/$RELEASE.txt")
# shellcheck disable=SC2086
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" python3 -m scripts.rig.slim_sglang "$DEST" $drops
du -sh "$DEST" | sed 's/^/compat bundle size: /'
