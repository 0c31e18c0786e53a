#!/usr/bin/env bash
# The project's test command (README, CI): a venv with the package, its test needs and the
# CPU builds of torch/triton for the kernel tests, then the whole suite (slow tests included).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -e ".[test]"
[ -f requirements-kernels.txt ] && "${pip[@]}" -r requirements-kernels.txt
exec "$venv/bin/python" -m pytest -q "$@"
