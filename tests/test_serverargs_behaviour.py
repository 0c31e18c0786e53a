"""SGLang's own server-arg code, before and after `ddtree-patch apply`, on real releases (CPU);
and SGLang's own target-verify attention kernel on a DDTree mask.

The claim under test: a patched SGLang routes `--speculative-algorithm DDTREE` through all of
DFlash's configuration (same steps, topk, overlap, draft tokens from the draft block size) and
adds the DDTree budget; an unpatched one rejects the name. Each release is installed alone with
`pip install --no-deps --target`, put on PYTHONPATH of a cached CPU venv holding only its
dependencies (tests/cpu_serverargs/venv_builder.py), and asked through `probe.py` in a
subprocess: SGLang is never imported into this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from packaging.version import Version

from tests.sglang_releases import install_release, release_metadata
from tests.cpu_serverargs.venv_builder import RELEASES, ensure_venv, release_pins

REPO = Path(__file__).resolve().parent.parent
HELPERS = REPO / "tests" / "cpu_serverargs"
TARGET_MODEL = REPO / "fixtures" / "models" / "tiny-qwen3"
DRAFT_MODEL = REPO / "fixtures" / "models" / "tiny-dflash-draft"
DRAFT_BLOCK_SIZE = json.loads((DRAFT_MODEL / "config.json").read_text())["block_size"]
# 16 is what DFlash falls back to when it cannot read the draft config: the fixture must differ.
assert DRAFT_BLOCK_SIZE != 16

DFLASH = ["--speculative-algorithm", "DFLASH"]
DDTREE = ["--speculative-algorithm", "DDTREE"]
UNPATCHED_CASES = {"dflash": DFLASH, "ddtree": DDTREE}
PATCHED_CASES = {
    **UNPATCHED_CASES,
    "ddtree_budget_5": DDTREE + ["--speculative-ddtree-budget", "5"],
    "ddtree_budget_negative": DDTREE + ["--speculative-ddtree-budget", "-1"],
}
# The DFlash settings the issue names; all others are compared too, these are also spot-checked.
DFLASH_DERIVED = {
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": DRAFT_BLOCK_SIZE,
}


class Release(NamedTuple):
    version: str
    python: Path  # the CPU venv's interpreter
    site: Path  # where `pip install --no-deps --target` put sglang


def _probe(release: Release, cases: dict[str, list[str]]) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": str(release.site),
        "PYTHONNOUSERSITE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [
            str(release.python), str(HELPERS / "probe.py"),
            "--target", str(TARGET_MODEL), "--draft", str(DRAFT_MODEL),
            "--cases", json.dumps(cases),
        ],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"probe failed on sglang {release.version}:\n{done.stderr[-4000:]}"
    report = json.loads(done.stdout)
    assert report["sglang_version"] == release.version
    assert Path(report["sglang_file"]).is_relative_to(release.site), "probe imported another sglang"
    return report


def _resolved(report: dict[str, Any], case: str) -> dict[str, Any]:
    outcome = report["cases"][case]
    if "resolved" not in outcome:
        error = outcome["error"]
        pytest.fail(f"{case} was rejected: {error['type']}: {error['message']}\n{error['traceback']}")
    return outcome["resolved"]


def _rejection(report: dict[str, Any], case: str) -> str:
    outcome = report["cases"][case]
    assert "error" in outcome, f"{case} resolved but should be rejected: {outcome['resolved']}"
    return f"{outcome['error']['message']} {outcome['error'].get('stderr', '')}"


def _without_ddtree_fields(resolved: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value
        for name, value in resolved.items()
        if name != "speculative_algorithm" and not name.startswith("speculative_ddtree_")
    }


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Release:
    version = request.param
    site = install_release(version, tmp_path_factory.mktemp(f"sglang-{version}") / "site")
    return Release(version, ensure_venv(version, release_metadata(site, version)), site)


@pytest.fixture(scope="module")
def unpatched(release: Release) -> dict[str, Any]:
    return _probe(release, UNPATCHED_CASES)


@pytest.fixture(scope="module")
def patched(release: Release, unpatched: dict[str, Any]) -> dict[str, Any]:
    """Apply the patch (after `unpatched` has looked at the pristine install) and probe again."""
    done = subprocess.run(
        [sys.executable, "-m", "ddtree_patch", "apply", "--target", str(release.site)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"apply failed on sglang {release.version}:\n{done.stdout}\n{done.stderr}"
    return _probe(release, PATCHED_CASES)


@pytest.mark.slow
def test_unpatched_resolves_dflash_from_the_draft_config(unpatched: dict[str, Any]) -> None:
    resolved = _resolved(unpatched, "dflash")
    assert resolved["speculative_algorithm"] == "DFLASH"
    assert {name: resolved[name] for name in DFLASH_DERIVED} == DFLASH_DERIVED


@pytest.mark.slow
def test_unpatched_rejects_ddtree(unpatched: dict[str, Any]) -> None:
    assert not unpatched["from_string"]["DDTREE"]["ok"]
    assert "DDTREE" in unpatched["from_string"]["DDTREE"]["error"]["message"]
    assert "DDTREE" in _rejection(unpatched, "ddtree")


@pytest.mark.slow
def test_patched_from_string_knows_ddtree_as_dflash_family(patched: dict[str, Any]) -> None:
    ddtree = patched["from_string"]["DDTREE"]
    assert ddtree["ok"], ddtree.get("error")
    assert ddtree["name"] == "DDTREE"
    assert ddtree["is_ddtree"] and ddtree["is_dflash"]
    assert ddtree.get("is_dflash_family", True)
    dflash = patched["from_string"]["DFLASH"]
    assert dflash["is_dflash"] and not dflash["is_ddtree"]


@pytest.mark.slow
def test_patched_ddtree_resolves_like_dflash(patched: dict[str, Any]) -> None:
    dflash = _resolved(patched, "dflash")
    ddtree = _resolved(patched, "ddtree")
    assert ddtree["speculative_algorithm"] == "DDTREE"
    assert {name: ddtree[name] for name in DFLASH_DERIVED} == DFLASH_DERIVED
    assert ddtree["disable_overlap_schedule"] == dflash["disable_overlap_schedule"]
    differing = {
        name: (dflash.get(name), ddtree.get(name))
        for name in _without_ddtree_fields(dflash).keys() | _without_ddtree_fields(ddtree).keys()
        if dflash.get(name) != ddtree.get(name)
    }
    assert differing == {}, "DDTREE resolved differently from DFLASH: (dflash, ddtree) per field"


@pytest.mark.slow
def test_patched_ddtree_budget_defaults_to_block_size_minus_one(patched: dict[str, Any]) -> None:
    ddtree = _resolved(patched, "ddtree")
    assert ddtree["speculative_ddtree_budget"] == DRAFT_BLOCK_SIZE - 1
    assert ddtree["speculative_ddtree_topk"] == ddtree["speculative_ddtree_budget"]
    assert ddtree["speculative_ddtree_allow_hybrid_unsafe"] is False


@pytest.mark.slow
def test_patched_ddtree_budget_from_the_command_line(patched: dict[str, Any]) -> None:
    ddtree = _resolved(patched, "ddtree_budget_5")
    assert ddtree["speculative_ddtree_budget"] == 5
    assert ddtree["speculative_num_draft_tokens"] == DRAFT_BLOCK_SIZE
    assert "budget" in _rejection(patched, "ddtree_budget_negative").lower()


@pytest.mark.slow
def test_patch_leaves_dflash_resolution_alone(
    unpatched: dict[str, Any], patched: dict[str, Any]
) -> None:
    before = _resolved(unpatched, "dflash")
    after = _resolved(patched, "dflash")
    assert _without_ddtree_fields(after) == _without_ddtree_fields(before)
    assert after["speculative_algorithm"] == "DFLASH"


def test_release_pins_reads_exact_runtime_pins_only() -> None:
    metadata = "\n".join(
        [
            "Name: sglang",
            "Requires-Dist: transformers==5.19.0",
            "Requires-Dist: flashinfer_python[cu13]==0.7.2",
            "Requires-Dist: av==16.1.0; sys_platform == 'linux'",
            "Requires-Dist: torch_memory_saver>=0.0.9.post1",
            "Requires-Dist: pytest==8.0.0; extra == 'test'",
        ]
    )
    assert release_pins(metadata) == {
        "transformers": "5.19.0",
        "flashinfer-python": "0.7.2",
        "av": "16.1.0",
    }


def test_torchvision_stand_in_satisfies_module_level_imports() -> None:
    code = "\n".join(
        [
            "import importlib.util, torchvision_stand_in",
            "torchvision_stand_in.install()",
            "import torchvision",
            "import torchvision.transforms.v2.functional as tvF",
            "from torchvision.transforms import InterpolationMode, Compose",
            "class Resize(Compose): pass",
            "Resize([1])(object())",
            "tvF.resize(None, [2, 2], interpolation=InterpolationMode.BICUBIC)",
            "assert importlib.util.find_spec('torchvision.io') is not None",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HELPERS, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.heavy
def test_sglang_triton_verify_attention_reads_the_ddtree_mask(release: Release) -> None:
    """The mask the DDTree worker hands SGLang is the one its Triton target-verify kernel reads:
    SGLang's own extend-attention kernel (interpreted on CPU) on a tree that leaves the
    first-child chain equals an ancestor-mask reference, and is far from a causal one; it skips the
    prefix columns, so the tree-only mask DDTree writes for it changes nothing."""
    env = {**os.environ, "PYTHONPATH": str(release.site), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run(
        [str(release.python), "-m", "tests.cpu_serverargs.tree_attention_probe"],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["off_chain"], "the tree must leave the chain, or causal and tree masks agree"
    assert report["max_err_tree"] < 1e-4
    assert report["max_err_causal"] > 1e-2
    # The tree-only mask (prefix columns False, unwritten on CUDA) gives the same attention, also as a
    # uint8 buffer with stale prefix bytes (built in place in the backend's graph buffer).
    assert report["tree_only_prefix_false"] and report["max_err_tree_only_mask"] < 1e-4
    assert report["stale_prefix"] and report["max_err_in_place_stale_uint8"] < 1e-4
    # ... and the facts the worker's gate (patches/tree_verify.py: mask_reads_prefix) relies on.
    assert report["backend_class"] == "TritonAttnBackend"
    assert report["skip_prefix_default"] is True and not report["backend_passes_skip_prefix"]


@pytest.mark.slow
def test_the_graph_mask_buffer_is_the_triton_backends_own(release: Release, patched: dict[str, Any]) -> None:
    """DDTREE_MASK_IN_PLACE: the dropped-in lookup finds the buffer SGLang's own Triton backend replays
    target-verify graphs with (its getter up to 0.5.16, its `verify_mask` from 0.5.17), the verify input's
    mask is a view of it in its dtype, and the release's replay assigns that mask onto the buffer (so the
    assignment has nothing to move)."""
    env = {**os.environ, "PYTHONPATH": str(release.site), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run([str(release.python), str(HELPERS / "mask_buffer_probe.py")], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = "verify_mask" if Version(release.version) >= Version("0.5.17") else "get_verify_buffers_to_fill_after_draft"
    assert report["lookup"] == expected
    assert report["found_is_the_buffer"] and report["mask_is_a_view"] and report["mask_numel"] == 8 * 14 + 2 * 64
    assert report["replay_assigns_onto_the_buffer"]


# Server flags for features the capability table declares absent: refused at start, one message
# each (ours where DDTree's validation runs first, SGLang's own where its gate no longer admits
# DDTREE); mixed chunked prefill is switched off by SGLang itself where it asks the algorithm.
ABSENT_FLAGS = {
    "ddtree_disaggregation": (DDTREE + ["--disaggregation-mode", "decode"], "pd-disaggregation"),
    "ddtree_lora": (DDTREE + ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "q_proj"], "lora"),
    "ddtree_hisparse": (DDTREE + ["--enable-hisparse"], "hisparse"),
}
ABSENT_FLAGS_0_5_22 = {
    "ddtree_unified_memory": (DDTREE + ["--enable-unified-memory"], "unified-memory"),
}


@pytest.mark.slow
def test_patched_ddtree_refuses_absent_server_features(release: Release, patched: dict[str, Any]) -> None:
    from patches.capabilities import CAPABILITIES

    flags = {**ABSENT_FLAGS, **(ABSENT_FLAGS_0_5_22 if Version(release.version) >= Version("0.5.22") else {})}
    report = _probe(release, {name: args for name, (args, _) in flags.items()})
    for name, (_, capability) in flags.items():
        assert CAPABILITIES[capability].refusal in _rejection(report, name), name


MIXED_CHUNK_CHECK = """
import torchvision_stand_in
torchvision_stand_in.install(("xgrammar",))
from sglang.srt.server_args import prepare_server_args
for algorithm in ("DFLASH", "DDTREE"):
    args = prepare_server_args(["--model-path", {target!r}, "--device", "cuda", "--enable-mixed-chunk",
                                "--speculative-draft-model-path", {draft!r}, "--speculative-algorithm", algorithm])
    try:
        getattr(args, "resolve_once", lambda: None)()
        args.check_server_args()
        print(algorithm, "accepted, enable_mixed_chunk =", args.enable_mixed_chunk)
    except (AssertionError, ValueError) as error:
        print(algorithm, "refused:", error)
"""


@pytest.mark.slow
def test_patched_ddtree_is_refused_mixed_chunk_at_start(release: Release, patched: dict[str, Any]) -> None:
    """Through a launch's own resolution and checks. Up to 0.5.18 DFlash's own handling turns
    mixed chunks off for both; from 0.5.19 DFLASH keeps them and DDTREE is refused (by DDTree's
    validation first; SGLang's `check_server_args` asks the DFlash-only `supports_mixed_chunk()` too)."""
    env = {**os.environ, "PYTHONPATH": f"{release.site}{os.pathsep}{HELPERS}", "PYTHONNOUSERSITE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    code = MIXED_CHUNK_CHECK.format(target=str(TARGET_MODEL), draft=str(DRAFT_MODEL))
    done = subprocess.run([str(release.python), "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("DFLASH", "DDTREE"))]
    from patches.capabilities import CAPABILITIES

    if Version(release.version) < Version("0.5.19"):
        assert lines == ["DFLASH accepted, enable_mixed_chunk = False", "DDTREE accepted, enable_mixed_chunk = False"]
    else:
        assert lines == ["DFLASH accepted, enable_mixed_chunk = True",
                         f"DDTREE refused: {CAPABILITIES['mixed-chunk'].refusal}"]
