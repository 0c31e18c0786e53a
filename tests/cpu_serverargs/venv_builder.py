"""One cached CPU venv per SGLang release, holding only what its server-arg resolution needs.

The venv holds dependencies only; the SGLang release itself is installed elsewhere with
`--no-deps --target` and put on PYTHONPATH, so one venv serves any number of patched copies.
Venvs live in $DDTREE_PATCH_VENV_CACHE/<recipe> (default ~/.cache/ddtree-patch/venvs/<recipe>), where
the recipe is the release's requirements-<version>.txt or, for a post release without one (0.5.15.post1),
its base release's: both then share one venv, so switching between them rebuilds nothing. A venv is
rebuilt only when its requirements file or the Python version changes. A file lock makes concurrent
builders wait for each other instead of racing on the same folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from packaging.version import InvalidVersion, Version

HERE = Path(__file__).resolve().parent
# The releases whose server-arg resolution tests/test_serverargs_behaviour.py probes; any release
# with a recipe here (`recipe_version`) gets a venv (the v1 round test uses 0.5.11-0.5.13).
RELEASES_ENV = "DDTREE_RUNTIME_RELEASES"  # comma-separated: replaces a runtime test's release list locally


def runtime_releases(default: tuple[str, ...]) -> tuple[str, ...]:
    """The releases a CPU runtime test drives: `default` in CI, DDTREE_RUNTIME_RELEASES for a local
    run on others (any release with a recipe here: `recipe_version`)."""
    chosen = os.environ.get(RELEASES_ENV, "")
    return tuple(v.strip() for v in chosen.split(",") if v.strip()) or default


RELEASES = runtime_releases(("0.5.15", "0.5.18", "0.5.23"))
STAMP = "ddtree-cpu-venv.json"
# Installed deliberately at another version than the release pins: the CPU build on local disk.
NOT_FROM_RELEASE = frozenset({"torch"})

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*(?:;(.*))?$")


def venv_cache() -> Path:
    default = Path.home() / ".cache" / "ddtree-patch" / "venvs"
    return Path(os.environ.get("DDTREE_PATCH_VENV_CACHE", default)).expanduser()


def requirements_file(version: str) -> Path:
    return HERE / f"requirements-{version}.txt"


def recipe_version(version: str) -> str:
    """The release whose requirements file builds `version`'s venv: its own, else its base release's
    (a post release changes SGLang's code, rarely its pins; `pin_conflicts` refuses it where it does)."""
    try:
        candidates = (version, Version(version).base_version)
    except InvalidVersion:
        candidates = (version,)
    for candidate in candidates:
        if requirements_file(candidate).is_file():
            return candidate
    known = sorted(p.stem.removeprefix("requirements-") for p in HERE.glob("requirements-*.txt"))
    raise ValueError(f"no CPU venv recipe for sglang {version}; known: {', '.join(known)}")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins(text: str) -> dict[str, str]:
    """`name==version` lines of a requirements file, keyed by normalised name."""
    pins = {}
    for line in text.splitlines():
        match = _PIN.match(line.split("#", 1)[0])
        if match:
            pins[_normal(match[1])] = match[2]
    return pins


def release_pins(metadata: str) -> dict[str, str]:
    """Exact (`==`) dependency pins of a wheel's METADATA, extras-only requirements left out."""
    pins = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        match = _PIN.match(line.removeprefix("Requires-Dist:"))
        if match and "extra ==" not in (match[3] or ""):
            pins[_normal(match[1])] = match[2]
    return pins


def pin_conflicts(version: str, metadata: str) -> list[str]:
    """Where the requirements file `version` is built from disagrees with an exact pin of the
    release's own METADATA (torch aside)."""
    recipe = recipe_version(version)
    ours = requirement_pins(requirements_file(recipe).read_text(encoding="utf-8"))
    theirs = release_pins(metadata)
    if "transformers" not in theirs:
        return [f"sglang {version} pins no transformers version in its METADATA"]
    return [
        f"{name}: requirements-{recipe}.txt has {ours[name]}, sglang {version} pins {pin}"
        for name, pin in sorted(theirs.items())
        if name in ours and name not in NOT_FROM_RELEASE and ours[name] != pin
    ]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _wanted_stamp(version: str) -> dict[str, str]:
    requirements = requirements_file(version).read_bytes()
    return {
        "sglang": version,
        "python": ".".join(map(str, sys.version_info[:3])),
        "requirements_sha256": hashlib.sha256(requirements).hexdigest(),
    }


def _current_stamp(venv: Path) -> dict[str, str] | None:
    try:
        return json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _run_logged(command: list[str], log: Path) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(command[:4])} ... failed (exit {done.returncode}):\n{tail}")


def ensure_venv(version: str, metadata: str) -> Path:
    """The venv for SGLang `version` (built now if missing or out of date); returns its python.

    `metadata` is the release's METADATA: building refuses when the requirements file disagrees
    with a version the release pins (transformers above all). The folder, lock and stamp are the
    recipe's, so a post release reuses its base release's venv.
    """
    recipe = recipe_version(version)
    conflicts = pin_conflicts(version, metadata)
    if conflicts:
        raise ValueError("requirements disagree with the release:\n" + "\n".join(conflicts))
    venv = venv_cache() / recipe
    wanted = _wanted_stamp(recipe)
    with _locked(venv_cache() / f".{recipe}.lock"):
        current = _current_stamp(venv) or {}
        if all(current.get(key) == value for key, value in wanted.items()):
            return venv_python(venv)
        shutil.rmtree(venv, ignore_errors=True)
        venv.mkdir(parents=True)
        log = venv / "build.log"
        started = time.monotonic()
        _run_logged([sys.executable, "-m", "venv", str(venv)], log)
        _run_logged(
            [
                str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-deps", "--no-input", "-r", str(requirements_file(recipe)),
            ],
            log,
        )  # fmt: skip
        stamp = {**wanted, "build_seconds": round(time.monotonic() - started, 1)}
        (venv / STAMP).write_text(json.dumps(stamp, indent=1), encoding="utf-8")
    return venv_python(venv)
