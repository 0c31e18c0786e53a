"""Which recipe and venv a release gets (tests/cpu_serverargs/venv_builder.py), on fake METADATA.

A post release (0.5.15.post1) has no requirements file of its own: it must get its base
release's recipe and share its venv (a second 2.3 GB venv per post release, rebuilt on every
switch, is what this guards against), while its own METADATA pins are still checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cpu_serverargs import venv_builder
from tests.cpu_serverargs.venv_builder import ensure_venv, pin_conflicts, recipe_version, requirement_pins


def _metadata(version: str, *requires: str) -> str:
    return "\n".join(["Name: sglang", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)])


def _transformers(recipe: str) -> str:
    pin = requirement_pins(venv_builder.requirements_file(recipe).read_text(encoding="utf-8"))["transformers"]
    return f"transformers=={pin}"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDTREE_PATCH_VENV_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("version", "recipe"), [("0.5.15", "0.5.15"), ("0.5.15.post1", "0.5.15"),
                                                 ("0.5.12.post1", "0.5.12"), ("0.5.23", "0.5.23")])
def test_a_release_gets_its_own_recipe_else_its_base_releases(version: str, recipe: str) -> None:
    assert recipe_version(version) == recipe


@pytest.mark.parametrize("version", ["0.4.0", "0.4.0.post1", "newest"])
def test_an_unknown_release_is_refused_with_the_known_recipes(cache: Path, version: str) -> None:
    with pytest.raises(ValueError, match=rf"no CPU venv recipe for sglang {version}; known: .*0\.5\.15") as error:
        ensure_venv(version, _metadata(version, "transformers==5.12.1"))
    assert "post1" not in str(error.value).split("known:")[1]
    assert list(cache.iterdir()) == []


def test_a_post_release_is_checked_against_its_own_pins() -> None:
    """0.5.12.post1 pins another cutlass-dsl than 0.5.12, which the 0.5.12 recipe does not hold: no
    conflict; a pin the recipe holds, moved, is one (named by the recipe and the post release)."""
    assert pin_conflicts("0.5.12.post1", _metadata("0.5.12.post1", _transformers("0.5.12"),
                                                   "nvidia-cutlass-dsl[cu13]==4.5.1")) == []
    assert pin_conflicts("0.5.12.post1", _metadata("0.5.12.post1", "transformers==0.0.1")) == [
        "transformers: requirements-0.5.12.txt has 5.6.0, sglang 0.5.12.post1 pins 0.0.1"]


def test_a_conflicting_post_release_builds_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(venv_builder, "_run_logged", lambda command, log: pytest.fail(f"built: {command}"))
    with pytest.raises(ValueError, match="requirements-0.5.12.txt has 5.6.0, sglang 0.5.12.post1 pins 0.0.1"):
        ensure_venv("0.5.12.post1", _metadata("0.5.12.post1", "transformers==0.0.1"))
    assert list(cache.iterdir()) == []


def test_a_post_release_builds_and_reuses_its_base_releases_venv(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built once, from the base recipe, into the base release's folder (lock and stamp too); then
    neither the base release nor the post release builds again."""
    commands: list[list[str]] = []
    monkeypatch.setattr(venv_builder, "_run_logged", lambda command, log: commands.append(command))

    python = ensure_venv("0.5.15.post1", _metadata("0.5.15.post1", _transformers("0.5.15")))
    assert python == cache / "0.5.15" / "bin" / "python"
    assert sorted(p.name for p in cache.iterdir()) == [".0.5.15.lock", "0.5.15"]
    assert commands[0][-1] == str(cache / "0.5.15")
    assert commands[-1][-1] == str(venv_builder.requirements_file("0.5.15"))
    assert json.loads((cache / "0.5.15" / venv_builder.STAMP).read_text())["sglang"] == "0.5.15"

    built = len(commands)
    assert ensure_venv("0.5.15", _metadata("0.5.15", _transformers("0.5.15"))) == python
    assert ensure_venv("0.5.15.post1", _metadata("0.5.15.post1", _transformers("0.5.15"))) == python
    assert len(commands) == built
