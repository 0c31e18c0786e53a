# Source me (bash) at the start of a device call: the one setup every GPU script shares.
# Unpacks the carried JIT / Triton caches, installs the gpurig bundle's SGLang afresh into
# $SITE (a warm machine keeps the last call's patched install), patches it with
# `ddtree-patch apply` (log: $OUT/apply.log) and leaves the shell in the repository root.
# Returns 1 when the bundle or the patch fails. Sets REPO, RIG, OUT, SITE (default /tmp/site, where the
# bundle's env.sh installs; tests point it elsewhere), PY.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RIG=${RIG:-$REPO/.gpurig} OUT=${OUT:-/tmp/out} PY=python3 SITE=${SITE:-/tmp/site}
mkdir -p "$OUT" /tmp/tvm-ffi-cache ~/.triton/cache
[ -d "$RIG/jitcache" ] && cp -rn "$RIG"/jitcache/. /tmp/tvm-ffi-cache/ 2>/dev/null
[ -f "$RIG/jitcache.tgz" ] && tar xzf "$RIG/jitcache.tgz" -C /tmp/tvm-ffi-cache 2>/dev/null
[ -f "$RIG/tritoncache.tgz" ] && tar xzf "$RIG/tritoncache.tgz" -C ~/.triton/cache 2>/dev/null
rm -rf "$SITE"
# shellcheck source=/dev/null
source "$RIG/scripts/env.sh" || { echo "bundle install failed"; return 1; }
# A bundle holding a real FlashInfer (scripts/rig/flashinfer.py: its wheel, no stand-in) may use it.
if compgen -G "$RIG/whl/flashinfer_python-*.whl" > /dev/null && [ ! -d "$RIG/stubs/flashinfer" ]; then
  export SGLANG_IS_FLASHINFER_AVAILABLE=true FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
  echo "[env] FlashInfer from the bundle: SGLANG_IS_FLASHINFER_AVAILABLE=true"
fi
cd "$REPO" || return 1
if python3 -m ddtree_patch apply --target "$SITE" > "$OUT/apply.log" 2>&1; then
  echo "[apply] ddtree-patch apply --target $SITE: OK"
else
  echo "[apply] ddtree-patch apply --target $SITE failed:"; tail -5 "$OUT/apply.log"; return 1
fi
