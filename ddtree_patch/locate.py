"""Find the installed SGLang without importing it, and refuse installs we must not patch.

Three ways in: the running interpreter (default), another interpreter (`--python`, asked in a
subprocess), or a folder (`--target`: a site-packages or the `sglang` package itself).
"""

from __future__ import annotations

import json
import errno
import os
import re
import shlex
import subprocess
from dataclasses import replace
from importlib.metadata import PathDistribution
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ddtree_patch.data.releases import FIRST_WITH_DFLASH, NEWEST_KNOWN
from ddtree_patch.errors import NotInstalled, Unsupported, UsageError
from ddtree_patch.model import Install
from ddtree_patch.record import parse_record, record_hash

# Runs inside the target interpreter: where would `import sglang` come from, and which
# distributions claim it. find_spec on a top-level name does not execute the package.
_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
spec = iu.find_spec("sglang")
origins = [str(p) for p in (spec.submodule_search_locations or [])] if spec else []
dists = []
for d in md.distributions(name="sglang"):
    direct = d.read_text("direct_url.json") or "{}"
    dists.append({"path": str(getattr(d, "_path", "")), "version": d.version, "direct_url": direct})
print(json.dumps({"origins": origins, "dists": dists, "python": sys.executable}))
"""


def _read_version(dist_info: Path) -> str:
    version = PathDistribution(dist_info).version
    if not version:
        raise NotInstalled(f"{dist_info}/METADATA has no Version: the install is damaged; reinstall SGLang")
    return version.strip()


def _dist_info_for(site_packages: Path) -> Path | None:
    found = [
        d for d in site_packages.glob("*.dist-info")
        if d.name.lower().startswith("sglang-") and (d / "METADATA").is_file()
    ]
    if len(found) > 1:  # `pip install --target --upgrade` leaves the old one: keep the owner
        owners = [d for d in found if _owns_package(d, site_packages)]
        if len(owners) != 1:
            names = ", ".join(sorted(d.name for d in found))
            raise NotInstalled(f"two SGLang dist-infos in {site_packages} ({names}): reinstall SGLang cleanly")
        found = owners
    return found[0] if found else None


def _owns_package(dist_info: Path, site_packages: Path) -> bool:
    """Does every `sglang/` file this RECORD lists hold the hash it gives (the installed release)?

    Only asked when two dist-infos are present, so reading the package once more is fine.
    """
    try:
        rows = parse_record((dist_info / "RECORD").read_bytes())
    except OSError:
        return False
    for row in rows:
        if not (row.path.startswith("sglang/") and row.hash):
            continue
        path = site_packages / row.path
        try:
            if path.stat().st_size != int(row.size or -1):
                return False
            if record_hash(path.read_bytes(), row.hash.split("=", 1)[0]) != row.hash:
                return False
        except (OSError, ValueError):
            return False
    return True


# `__version__ = "x"`, `__version__: str = "x"`, `__version__ = version = "x"`, at a line's start
_VERSION_LINE = re.compile(r"^__version__\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)*[\"']([^\"']+)", re.M)


def _version_file(package_dir: Path) -> str | None:
    """The version written into the package, without importing it: `_version.py` (what a build
    writes; 0.5.x's `version.py` imports it and falls back to a dev placeholder), else `version.py`."""
    for name in ("_version.py", "version.py"):
        source = package_dir / name
        if source.is_file():
            match = _VERSION_LINE.search(source.read_text(encoding="utf-8"))
            if match:
                return match.group(1)
    return None


WITHOUT_STRICT = "ddtree-patch {command}"  # the same command without --strict: the audit decides


def _check_release(install: Install, strict: bool) -> Install:
    try:
        version = Version(Version(install.version).base_version)  # a .postN / rcN is its release
    except InvalidVersion:  # not PEP 440: the audit, which reads the code, decides
        message = f"SGLang's version {install.version!r} is not a PEP 440 version, so it cannot be compared"
        if strict:
            raise Unsupported(message + ": refusing because of --strict", install, next=WITHOUT_STRICT) from None
        return replace(install, warnings=install.warnings + (message + "; the audit decides",))
    if version < Version(FIRST_WITH_DFLASH):
        raise Unsupported(
            f"SGLang {install.version} has no DFLASH (it first shipped in {FIRST_WITH_DFLASH}): "
            f"upgrade SGLang to {FIRST_WITH_DFLASH} or newer", install
        )
    if version > Version(NEWEST_KNOWN):
        message = f"SGLang {install.version} is newer than the newest release tested ({NEWEST_KNOWN})"
        if strict:
            raise Unsupported(message + ": refusing because of --strict", install, next=WITHOUT_STRICT)
        return replace(install, warnings=install.warnings + (message + "; the audit decides",))
    return install


def _no_package(target: Path) -> str:
    if target.is_file():
        return f"--target {target} is a file: pass a site-packages folder or the sglang folder"
    if any(target.glob("*.dist-info")) or target.name in ("site-packages", "dist-packages"):
        where = shlex.quote(str(target))
        return (f"no sglang package in {target}: install it there (`pip install --target {where} sglang`) "
                "or pass the site-packages that holds it (`python -m pip show -f sglang` prints its Location)")
    return f"no sglang package in {target}: pass a site-packages folder or the sglang folder"


def from_folder(target: Path, strict: bool = False) -> Install:
    target = target.expanduser().resolve()
    if (target / "sglang" / "__init__.py").is_file():
        site_packages = target
    elif target.name == "sglang" and (target / "__init__.py").is_file():
        site_packages = target.parent
    elif not target.exists():
        raise NotInstalled(f"--target {target} does not exist: pass a site-packages folder or the sglang folder")
    else:
        raise NotInstalled(_no_package(target))
    package_dir = site_packages / "sglang"
    dist_info = _dist_info_for(site_packages)
    warnings: tuple[str, ...] = ()
    if dist_info is not None:
        version = _read_version(dist_info)
    else:
        version = _version_file(package_dir) or "0"
        warnings = (f"no sglang dist-info beside {package_dir}: RECORD will not be updated",)
    return _check_release(Install(site_packages, package_dir, dist_info, version, warnings), strict)


_PASS_ONE = "pass a Python interpreter (e.g. /path/to/venv/bin/python)"


def _excerpt(data: bytes) -> str:
    """What a program printed, for a message: one line, never long."""
    text = data.decode("utf-8", "backslashreplace").strip()
    last = (text.splitlines() or [""])[-1]
    return last[:160] + " ..." if len(last) > 200 else last  # e.g. a program echoing the probe back


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _reply(python: str, stdout: bytes) -> dict:
    """The probe's answer, checked field by field against what `_PROBE` prints: a program that is not
    Python (or a wrapper that prints something else) is named with what it printed instead."""
    def wrong(what: str) -> UsageError:
        return UsageError(f"--python {python} did not answer like a Python interpreter ({what}); {_PASS_ONE}")

    try:
        probe = json.loads(stdout.decode("utf-8"))
    except UnicodeDecodeError:
        raise wrong("it printed bytes that are not UTF-8") from None
    except json.JSONDecodeError:
        shown = _excerpt(stdout)
        raise wrong(f"it printed {shown!r}" if shown else "it printed nothing") from None
    fields = probe.keys() if isinstance(probe, dict) else ()
    if set(fields) != {"origins", "dists", "python"}:
        raise wrong(f"it printed {_excerpt(stdout)!r}")
    dists = probe["dists"]
    if not (isinstance(probe["python"], str) and _str_list(probe["origins"]) and isinstance(dists, list)
            and all(isinstance(d, dict) and isinstance(d.get("path"), str) and isinstance(d.get("direct_url"), str)
                    for d in dists)):
        raise wrong(f"its answer has fields of the wrong type: {_excerpt(stdout)!r}")
    return probe


def from_interpreter(python: str, strict: bool = False) -> Install:
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UsageError(f"cannot run --python {python}: {error}") from error
    if done.returncode != 0:
        last = _excerpt(done.stderr)
        why = f": {last}" if last else " and printed nothing"
        raise UsageError(f"--python {python} exited with status {done.returncode}{why}; {_PASS_ONE}")
    probe = _reply(python, done.stdout)
    return replace(_from_probe(probe, strict), python=python)  # the pip advice uses its `-m pip`


def from_current(strict: bool = False) -> Install:
    import sys

    return from_interpreter(sys.executable, strict)


def _direct_url(dist: dict, python: str) -> dict:
    """PEP 610's direct_url.json of a distribution ({} when it has none)."""
    try:
        data = json.loads(dist["direct_url"])
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info", {}), dict):
        raise NotInstalled(f"{dist['path']}/direct_url.json is not a JSON object as PEP 610 writes it: "
                           f"the install is damaged; reinstall SGLang (`{shlex.quote(python)} -m pip install "
                           "--force-reinstall --no-deps sglang`)")
    return data


def _from_probe(probe: dict, strict: bool) -> Install:
    python = probe["python"]
    if not probe["origins"] and not probe["dists"]:
        raise NotInstalled(f"SGLang is not installed for {python}: pip install sglang, or pass --target DIR")
    if len(probe["dists"]) > 1:
        paths = ", ".join(d["path"] for d in probe["dists"])
        raise NotInstalled(f"two copies of SGLang are on the path of {python} ({paths}): uninstall one")
    for dist in probe["dists"]:
        if _direct_url(dist, python).get("dir_info", {}).get("editable"):
            raise NotInstalled(
                f"SGLang is an editable install ({dist['path']}): patch your checkout with git, "
                "or pass --target to a regular install"
            )
    if len(probe["origins"]) != 1:
        raise NotInstalled(f"sglang resolves to {len(probe['origins'])} folders for {python}: {probe['origins']}")
    package_dir = Path(probe["origins"][0])
    if probe["dists"] and Path(probe["dists"][0]["path"]).parent != package_dir.parent:
        raise NotInstalled(
            f"SGLang's files ({package_dir}) are not beside its metadata ({probe['dists'][0]['path']}): "
            "an editable or path-hacked install; pass --target"
        )
    return from_folder(package_dir.parent, strict)


SHORTER_FOLDER = "install SGLang under a shorter folder, then run ddtree-patch {command} on that install"


def path_too_long(error: OSError, install: Install | None) -> NotInstalled:
    """ENAMETOOLONG while reading or writing an install: its folder is so deep that some of its
    files (or the ones the patch adds) pass the OS path limit, where Python cannot import them either."""
    name = os.fsdecode(error.filename or "")
    limit = os.pathconf("/", "PC_PATH_MAX")
    site = str(install.site_packages) if install is not None else ""
    if site and name.startswith(site + os.sep):
        what = f"{name[len(site) + 1:]} in this site-packages ({len(site)} characters) makes a path"
    else:
        what = f"a path ({name[:120]} ...)" if len(name) > 120 else f"a path ({name})"
    return NotInstalled(f"{what} of {len(name)} characters, too long for this system (PATH_MAX {limit}): "
                        "Python cannot import files there either", next=SHORTER_FOLDER)


def os_failure(error: OSError, install: Install | None) -> NotInstalled:
    """An OS error reading the install outside a transaction (a transaction reports its own):
    one line naming the file and the reason, never a traceback."""
    if error.errno == errno.ENAMETOOLONG:
        return path_too_long(error, install)
    name = os.fsdecode(error.filename or "") or "a file of the install"
    return NotInstalled(f"cannot read {name}: {error.strerror or error}",
                        next="make the install readable by this user, then run ddtree-patch {command} again")


def locate(python: str | None = None, target: Path | None = None, strict: bool = False) -> Install:
    if python and target:
        raise UsageError("pass either --python or --target, not both")
    if target is not None:
        return from_folder(target, strict)
    return from_interpreter(python, strict) if python else from_current(strict)
