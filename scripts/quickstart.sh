#!/usr/bin/env bash
# Quickstart on a fresh machine: a local venv with this package and a real SGLang release
# (no dependencies needed to patch it), then the audit and the dry-run diff of `apply`.
#   bash scripts/quickstart.sh [sglang-version]        (default 0.5.15)
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-0.5.15}"
venv=.venv-quickstart
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# installed as the README tells users to install it (a wheel built from this checkout, not editable)
"$venv/bin/python" -m pip install -q --disable-pip-version-check .
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "sglang==$version"
echo "== ddtree-patch audit (SGLang $version in $venv)"
status=0
"$venv/bin/ddtree-patch" audit || status=$?   # 1 = an UNHANDLED site, listed above
echo "== ddtree-patch apply --dry-run"
"$venv/bin/ddtree-patch" apply --dry-run
# The venv is not activated in the caller's shell, so `ddtree-patch` alone is not on its PATH:
# name the command by its full path (the lines above name it as an activated venv would).
bin=$(printf '%q' "$PWD/$venv/bin")
echo "== next (this venv is not activated, so ddtree-patch is not on your PATH):"
echo "  $bin/ddtree-patch apply        (or: source $bin/activate, then: ddtree-patch apply)"
exit "$status"
