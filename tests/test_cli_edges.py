"""What a user meets at the edges of the command line: a reader that leaves early, paths that need
quoting in the commands we suggest, a package folder without dist-info, a revert with nothing to
revert, an apply with nothing to do."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MINI = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"
ENV = {**os.environ, "COLUMNS": "80", "DDTREE_PATCH_CACHE": "off"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args], capture_output=True, text=True,
                          env=ENV, timeout=300)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return Path(shutil.copytree(MINI, tmp_path / "site with space ü"))


@pytest.mark.parametrize("verb", ["status", "audit", "revert", "apply"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_reader_that_left_is_not_an_error(site: Path, verb: str, as_json: bool) -> None:
    """stdout is a pipe whose reader is gone before the first byte (`ddtree-patch status | head -0`):
    the command's own exit code, nothing on stderr, as when the reader had read everything."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "ddtree_patch", verb, "--target", str(site),
                               *(["--json"] if as_json else [])],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, env=ENV, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    if verb == "apply":
        assert _cli("status", "--target", str(site)).stdout.startswith("state: patched")


def test_status_into_head_ends_the_same_way_every_time(site: Path) -> None:
    """`status | head -1`: whether head leaves before or after status has written is chance; the
    outcome may not be (it was exit 141 with an `error:` line in some runs, 0 in others)."""
    script = 'python="$1"; shift; "$python" -m ddtree_patch "$@" | head -1 >/dev/null; echo "${PIPESTATUS[0]}"'
    outcomes = set()
    for round in range(30):
        args = ["status", "--target", str(site), *(["--json"] if round % 2 else [])]
        done = subprocess.run(["bash", "-c", script, "-", sys.executable, *args],
                              capture_output=True, text=True, env=ENV, timeout=300)
        outcomes.add((done.stdout.strip(), done.stderr))
    assert outcomes == {("0", "")}, outcomes


def test_a_closed_stderr_keeps_the_exit_code(site: Path) -> None:
    """`ddtree-patch revert 2>&1 | head -0` on a drifted install: the message has no reader, 9 still tells."""
    assert _cli("apply", "--target", str(site)).returncode == 0
    edited = next(p for p in (site / "sglang").rglob("*.py") if "DDTREE" in p.read_text())
    edited.write_text(edited.read_text() + "# hand edit\n")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "ddtree_patch", "revert", "--target", str(site)],
                              stdout=write_end, stderr=write_end, env=ENV, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == 9


def test_suggested_commands_survive_a_shell(site: Path) -> None:
    """The `next:` / `undo:` commands quote the path, so pasting them reaches the same install."""
    done = _cli("apply", "--target", str(site))
    assert done.returncode == 0, done.stderr
    undo = next(line for line in done.stdout.splitlines() if line.startswith("undo:"))
    command = shlex.split(undo.split("`")[1])
    assert command[:2] == ["ddtree-patch", "revert"] and command[command.index("--target") + 1] == str(site)
    assert _cli(*command[1:]).returncode == 0
    assert _cli("status", "--target", str(site)).stdout.startswith("state: pristine")


def test_apply_again_says_it_wrote_nothing(site: Path) -> None:
    assert _cli("apply", "--target", str(site)).returncode == 0
    again = _cli("apply", "--target", str(site))
    assert again.returncode == 0
    first = again.stdout.splitlines()[0]
    assert first.startswith("unchanged: this patch is already in place (") and "edited:" not in again.stdout


def test_revert_with_nothing_applied_touches_nothing(site: Path) -> None:
    """No state folder: nothing to lock or write (a read-only site-packages included)."""
    done = _cli("revert", "--target", str(site))
    assert done.returncode == 0 and done.stdout.startswith("nothing to revert"), done.stdout + done.stderr
    assert not (site / ".ddtree-patch").exists()


def test_a_package_folder_without_dist_info_is_read_from_its_version_file(tmp_path: Path) -> None:
    """A build writes `_version.py` (`__version__ = version = '0.5.15'`); 0.5.x's `version.py`
    imports it and only falls back to a dev placeholder, which is not the release."""
    site = tmp_path / "bare"
    shutil.copytree(MINI / "sglang", site / "sglang")
    (site / "sglang" / "_version.py").write_text(
        "__version__: str\n__version__ = version = '0.5.15'\n__version_tuple__ = (0, 5, 15)\n")
    (site / "sglang" / "version.py").write_text(
        "try:\n    from sglang._version import __version__\nexcept ImportError:\n"
        "    __version__ = get_version(fallback_version='0.0.0.dev0')\n")
    done = _cli("status", "--target", str(site))
    assert done.returncode == 0 and done.stdout.startswith("state: pristine (SGLang 0.5.15)"), done.stdout + done.stderr


def test_a_release_refused_by_strict_is_still_named(site: Path) -> None:
    """--json: `sglang` is null only when no SGLang was found; one found and refused is reported."""
    meta = site / "sglang-0.5.15.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.15", "Version: 0.5.99"))
    done = _cli("apply", "--strict", "--target", str(site), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 4 and doc["error"]["code"] == 4 and "--strict" in doc["error"]["message"]
    assert doc["sglang"]["version"] == "0.5.99"


def test_an_error_without_a_command_in_it_is_followed_by_what_to_run(tmp_path: Path) -> None:
    done = _cli("status", "--target", str(tmp_path / "nowhere"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and len(lines) == 2 and lines[0].startswith("error:"), done.stderr
    assert lines[1].startswith("next: ddtree-patch status --target"), done.stderr


def test_the_advice_for_a_corrupt_manifest_leads_back_to_a_patch(site: Path, tmp_path: Path) -> None:
    """Exit 8's steps, followed to the letter (the reinstall done by copying the pristine files back),
    end in a working apply, with the damaged state kept beside."""
    pristine = Path(shutil.copytree(site, tmp_path / "pristine"))
    assert _cli("apply", "--target", str(site)).returncode == 0
    manifest = next((site / ".ddtree-patch" / "sglang").glob("manifest*"))
    manifest.write_text("{not json")
    failed = _cli("apply", "--target", str(site))
    assert failed.returncode == 8, failed.stderr
    move = next(part for part in failed.stderr.split("`") if part.startswith("mv "))
    shutil.rmtree(site / "sglang")
    shutil.copytree(pristine / "sglang", site / "sglang")  # pip install --force-reinstall
    subprocess.run(move, shell=True, check=True)
    assert (site / ".ddtree-patch" / "sglang.damaged").is_dir()
    done = _cli("apply", "--target", str(site))
    assert done.returncode == 0 and done.stdout.startswith("applied"), done.stdout + done.stderr


def test_a_foreign_ddtree_module_is_named_with_the_way_out(site: Path) -> None:
    """A `srt/speculative/ddtree/worker.py` ddtree-patch did not write: apply refuses (exit 3, nothing
    written) and says how to move it aside; after that, apply works."""
    foreign = site / "sglang" / "srt" / "speculative" / "ddtree"
    foreign.mkdir(parents=True)
    (foreign / "worker.py").write_text("# someone else's DDTree\n")
    failed = _cli("apply", "--target", str(site))
    assert failed.returncode == 3 and "did not write it" in failed.stderr, failed.stderr
    assert _cli("status", "--target", str(site)).stdout.startswith("state: pristine")
    move = next(part for part in failed.stderr.split("`") if part.startswith("mv "))
    subprocess.run(move, shell=True, check=True)
    done = _cli("apply", "--target", str(site))
    assert done.returncode == 0 and done.stdout.startswith("applied"), done.stdout + done.stderr


def test_status_says_when_another_run_holds_the_lock(site: Path) -> None:
    from filelock import FileLock

    lock = site / ".ddtree-patch" / "sglang.lock"
    lock.parent.mkdir()
    with FileLock(str(lock)):
        done = _cli("status", "--target", str(site))
    assert done.returncode == 0 and done.stdout.splitlines()[1].startswith("busy: another ddtree-patch holds the lock")
    assert "busy" not in _cli("status", "--target", str(site)).stdout


def _deep_copy(source: Path, tmp_path: Path, length: int) -> Path:
    """`source` copied into a folder whose path is `length` characters long (copied by relative
    paths, so the files whose full path passes the OS limit are written too)."""
    folder = tmp_path
    while length - len(str(folder)) > 201:
        folder /= "d" * 200
    folder /= "s" * (length - len(str(folder)) - 1)
    folder.mkdir(parents=True)
    subprocess.run(["cp", "-a", f"{source}/.", "."], cwd=folder, check=True)
    return folder


@pytest.mark.parametrize("length", [4040, 4060])
def test_a_site_whose_paths_pass_the_os_limit_is_one_line(tmp_path: Path, length: int) -> None:
    """Some files of the install (or the drop-ins apply would add) pass PATH_MAX: exit 3, one line
    naming the file and the limit, and the way out; never an OSError traceback."""
    site = _deep_copy(MINI, tmp_path, length)
    for verb in ("audit", "apply"):
        done = _cli(verb, "--target", str(site))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert lines[0].startswith("error: sglang/") and "too long for this system (PATH_MAX" in lines[0], lines[0]
        assert lines[1] == f"next: install SGLang under a shorter folder, then run ddtree-patch {verb} on that install"


def test_a_drop_in_folder_past_the_os_limit_is_not_called_a_full_disk(tmp_path: Path) -> None:
    """The install's own files fit, the folder apply would create does not: the transaction refuses
    before writing (exit 10), and the next step is a shorter folder, not "free the space"."""
    site = _deep_copy(MINI, tmp_path, 4050)
    done = _cli("apply", "--target", str(site))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 10 and "nothing was written" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert lines[1] == "next: install SGLang under a shorter folder, then run ddtree-patch apply on that install"
    assert _cli("status", "--target", str(site)).stdout.startswith("state: pristine")


def test_a_target_longer_than_the_os_limit_is_one_line(tmp_path: Path) -> None:
    done = _cli("status", "--target", str(tmp_path) + ("/" + "d" * 200) * 21, "--json")
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 3 and "too long for this system" in error["message"], done.stdout


@pytest.mark.slow
def test_a_release_whose_paths_pass_the_os_limit_is_one_line(release_site, tmp_path: Path) -> None:
    """0.5.23 at a depth where its longest modules pass PATH_MAX: the scan says so (it was an OSError)."""
    site = _deep_copy(release_site("0.5.23"), tmp_path, 4035)
    for verb in ("audit", "apply"):
        done = _cli(verb, "--target", str(site))
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "too long for this system" in done.stderr.splitlines()[0]
    assert not (site / "sglang" / "srt" / "speculative" / "ddtree").exists()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bare_cr_round_trip(site: Path) -> None:
    """Every file the patch edits rewritten with old-Mac line endings (bare CR): apply patches them
    in their own line ending (no LF, compiles), audit proves it, revert is byte-exact. It was
    "please report this bug" (exit 5): libcst drops a module's last bare CR, so an edited chunk ran
    into the next line."""
    preview = _cli("apply", "--dry-run", "--target", str(site), "--json")
    rels = [f"sglang/{path}" for path in json.loads(preview.stdout)["edits"]]
    assert rels, preview.stdout
    for rel in rels:
        path = site / rel
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    before = _files(site)
    done = _cli("apply", "--target", str(site), "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(json.loads(done.stdout)["edited"]) == sorted(rels)
    for rel in rels:
        data = (site / rel).read_bytes()
        assert b"\n" not in data and data != before[rel], rel
        compile(data, rel, "exec", dont_inherit=True)
    assert _cli("audit", "--target", str(site)).returncode == 0
    assert _cli("revert", "--target", str(site)).returncode == 0
    assert _files(site) == before


def test_bare_cr_files_are_patched_in_their_own_line_ending(site: Path) -> None:
    _bare_cr_round_trip(site)


@pytest.mark.slow
def test_bare_cr_files_of_a_release_are_patched_byte_exactly(fresh_release) -> None:
    _bare_cr_round_trip(fresh_release("0.5.23"))


UNREADABLE = """
import errno, os, pathlib, sys
real = pathlib.Path.read_bytes
def read_bytes(self):
    if self.name == "spec_info.py":
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
    return real(self)
pathlib.Path.read_bytes = read_bytes
from ddtree_patch.cli import main
sys.argv = ["ddtree-patch", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("verb", ["audit", "apply"])
def test_a_file_of_the_install_it_cannot_read_is_one_line(site: Path, verb: str) -> None:
    """Permission denied while scanning (root reads everything, so the denial is planted): exit 3,
    one line naming the file and the reason, the way out; never an OSError traceback."""
    done = subprocess.run([sys.executable, "-c", UNREADABLE, verb, "--target", str(site)],
                          capture_output=True, text=True, env=ENV, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[0].startswith("error: cannot read ") and lines[0].endswith("spec_info.py: Permission denied"), lines
    assert lines[1] == f"next: make the install readable by this user, then run ddtree-patch {verb} again"
