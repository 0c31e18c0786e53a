"""State folder: paths read back from manifest/journal cannot lead outside the package."""

from __future__ import annotations

import json
import os

import pytest

from ddtree_patch.errors import CorruptState
from ddtree_patch.state import StatePaths, checked_path, load_manifest, pristine_view
from ddtree_patch.transaction import apply_plan, revert
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import handmade_plan, snapshot


@pytest.fixture
def install(tmp_path):
    return make_tiny_install(tmp_path / "site")


@pytest.mark.parametrize(
    "rel",
    [
        "../evil.py",
        "/etc/passwd",
        "sglang/../../evil.py",
        "sglang/./x.py",
        "sglang//x.py",
        "sglang",
        "other/x.py",
        "sglang\\..\\x.py",
        "",
    ],
)
def test_paths_outside_the_package_are_refused(install, rel):
    with pytest.raises(CorruptState):
        checked_path(install, rel)


def test_record_path_must_be_exactly_the_installs_record(install):
    assert checked_path(install, f"{install.dist_info.name}/RECORD", record=True) == install.record
    with pytest.raises(CorruptState):
        checked_path(install, f"{install.dist_info.name}/METADATA", record=True)


def test_a_link_inside_the_package_that_leads_outside_is_refused(install, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", install.package_dir / "link")
    with pytest.raises(CorruptState, match="link"):
        checked_path(install, "sglang/link/x.py")


def _tamper(install, path_from, path_to):
    manifest = StatePaths(install).manifest
    raw = json.loads(manifest.read_text())
    for entry in raw["changes"]["edited"]:
        if entry["path"] == path_from:
            entry["path"] = path_to
    manifest.write_text(json.dumps(raw))


def test_tampered_manifest_makes_revert_refuse_and_write_nothing(install, tmp_path):
    apply_plan(handmade_plan(install), "1")
    victim = tmp_path / "victim.py"
    victim.write_text("precious\n")
    _tamper(install, "sglang/srt/server_args.py", "sglang/../../victim.py")
    before = snapshot(tmp_path)
    with pytest.raises(CorruptState) as err:
        revert(install, force=True)
    assert err.value.exit_code == 8 and "outside" in err.value.message
    assert snapshot(tmp_path) == before
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"schema": 99}', b'{"schema": 1}'])
def test_unreadable_manifest_is_corrupt_state(install, content):
    apply_plan(handmade_plan(install), "1")
    StatePaths(install).manifest.write_bytes(content)
    with pytest.raises(CorruptState) as err:
        load_manifest(install)
    assert err.value.exit_code == 8


def test_state_folder_is_readable_by_a_person(install):
    apply_plan(handmade_plan(install), "1")
    paths = StatePaths(install)
    raw = json.loads(paths.manifest.read_text())
    assert raw["tool_version"] == "1" and raw["sglang_version"] == install.version
    edited = {e["path"]: e for e in raw["changes"]["edited"]}
    original = paths.original("sglang/srt/server_args.py").read_bytes()
    assert original == handmade_plan(install).edits[1].before
    assert edited["sglang/srt/server_args.py"]["mode"].startswith("0o")
    assert paths.lock == install.site_packages / ".ddtree-patch" / "sglang.lock"


def test_pristine_view_reads_backups_while_patched(install):
    plan = handmade_plan(install)
    apply_plan(plan, "1")
    view = pristine_view(install)
    assert view.read("srt/server_args.py") == plan.edits[1].before
    assert view.read("version.py") == (install.package_dir / "version.py").read_bytes()
    assert view.added == {a.path for a in plan.added}


def test_pristine_view_reads_the_backup_of_a_file_changed_since_apply(install):
    """A hand-edited (or deleted) patched file: the original is its backup, never the disk (whose
    bytes hold our edits, e.g. our DDTREE member, which the engine would take for SGLang's)."""
    plan = handmade_plan(install)
    apply_plan(plan, "1")
    target = install.package_dir / "srt" / "server_args.py"
    target.write_bytes(target.read_bytes() + b"# hand edit\n")
    assert pristine_view(install).read("srt/server_args.py") == plan.edits[1].before
    target.unlink()
    assert pristine_view(install).read("srt/server_args.py") == plan.edits[1].before


@pytest.mark.parametrize("how", ["a backup missing", "a backup damaged", "the manifest moved away"])
def test_pristine_view_refuses_a_state_that_cannot_give_the_originals(install, how):
    apply_plan(handmade_plan(install), "1")
    paths = StatePaths(install)
    backup = paths.original("sglang/srt/server_args.py")
    if how == "a backup missing":
        backup.unlink()
    elif how == "a backup damaged":
        backup.write_bytes(b"not the original\n")
    else:
        paths.manifest.rename(install.site_packages / "manifest.json")
    with pytest.raises(CorruptState) as err:
        pristine_view(install)
    assert err.value.exit_code == 8 and "Do not delete" in err.value.message
    assert err.value.next == (
        f"pip install --force-reinstall --no-deps --upgrade --target {install.site_packages} sglang==0.5.99"
    )


def test_state_fields_are_read_back_as_their_types_and_only_str_or_int_is_allowed():
    """Every manifest and journal field but the changes is converted from JSON by its type; a record
    with another field type is refused where it is read, not passed through unconverted."""
    from dataclasses import dataclass

    from ddtree_patch.state import Journal, Manifest, state_scalars

    assert state_scalars(Manifest) == {"tool_version": str, "sglang_version": str, "python": str, "applied_at": str,
                                       "schema": int}
    assert state_scalars(Journal)["pid"] is int and "changes" not in state_scalars(Journal)

    @dataclass(frozen=True)
    class Odd:
        ratio: float
        changes: tuple = ()

    with pytest.raises(TypeError, match="ratio"):
        state_scalars(Odd)
