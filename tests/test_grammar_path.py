"""Grammar-constrained DDTREE through each release's real scheduler path and grammar backend (CPU).

0.5.17+ (0.5.23 in CI): tests/round_harness/grammar_path.py, in the release's CPU venv with the
release's own xgrammar pin installed beside it (`pip install --no-deps --target`, the wheel cached
with the SGLang wheels), drives DDTREE rounds through `Scheduler.run_batch` (with and without
overlap) for three JSON schemas, three regexes, and an EBNF grammar batched with a regex and a
request without a grammar; the release's result processor advances each matcher along the accepted
runs. DDTREE's constrained greedy output equals the release's plain constrained greedy output, every
output parses / matches, accepted paths leave the first-child chain, and sampled outputs stay
inside the grammar. 0.5.15: DDTREE refuses grammar requests with the capability's message.
DDTREE_RUNTIME_RELEASES selects other releases.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
from packaging.version import Version

from patches.capabilities import CAPABILITIES
from tests.cpu_serverargs.venv_builder import runtime_releases
from tests.sglang_releases import patched_release, wheel_cache

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "round_harness" / "grammar_path.py"
HELPERS = REPO / "tests" / "cpu_serverargs"  # the torchvision stand-in scheduler_path imports
RELEASES = runtime_releases(("0.5.15", "0.5.23"))
SERVES_GRAMMARS = Version("0.5.17")


def xgrammar_site(site: Path, folder: Path) -> Path:
    """The release's pinned xgrammar (its METADATA's `xgrammar==`), installed alone under `folder`."""
    metadata = next(site.glob("sglang-*.dist-info/METADATA")).read_text(encoding="utf-8")
    version = re.search(r"^Requires-Dist: xgrammar==([^\s;]+)", metadata, re.M)[1]
    cache = wheel_cache()
    with FileLock(str(cache / ".download.lock")):
        if not list(cache.glob(f"xgrammar-{version}-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "--disable-pip-version-check", "-q", "-d", str(cache), f"xgrammar=={version}"], check=True)
    wheel = sorted(cache.glob(f"xgrammar-{version}-*.whl"))[-1]
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--disable-pip-version-check",
                    "-q", "--target", str(folder), str(wheel)], check=True)
    return folder


@pytest.fixture(scope="module", params=RELEASES)
def release(request, tmp_path_factory):
    version = request.param
    site, python = patched_release(version, tmp_path_factory.mktemp(f"grammar-{version}"))
    return version, site, python


def _env(site: Path, *extra: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (site, *extra))), "PYTHONNOUSERSITE": "1",
            "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"}


@pytest.fixture(scope="module")
def report(release, tmp_path_factory) -> dict:
    version, site, python = release
    if Version(version) < SERVES_GRAMMARS:
        pytest.skip(f"SGLang {version} has no tree grammar walk for DFlash-family workers (refused: below)")
    xgr = xgrammar_site(site, tmp_path_factory.mktemp("xgrammar"))
    done = subprocess.run([str(python), str(HARNESS)], capture_output=True, text=True, env=_env(site, xgr, HELPERS),
                          cwd=tmp_path_factory.mktemp("drive"), timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _text(report: dict, tokens: list[int]) -> str:
    return "".join(report["vocab"][t] for t in tokens if t != report["eos"])


def _ebnf_ok(text: str) -> bool:
    """root ::= expr; expr ::= term (("+" | "*") term)*; term ::= [0-9] | "(" expr ")"."""
    def ok(node) -> bool:
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, (ast.Add, ast.Mult)) and ok(node.left) and ok(node.right)
        return isinstance(node, ast.Constant) and isinstance(node.value, int) and 0 <= node.value <= 9
    try:
        return re.fullmatch(r"[0-9+*()]+", text) is not None and ok(ast.parse(text, mode="eval").body)
    except SyntaxError:
        return False


def _json_ok(text: str, schema: dict) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict) or set(value) != set(schema["required"]):
        return False
    for key, rule in schema["properties"].items():
        item = value[key]
        kind = rule.get("type")
        if "enum" in rule and item not in rule["enum"]:
            return False
        if kind == "integer" and not (isinstance(item, int) and rule["minimum"] <= item <= rule["maximum"]):
            return False
        if kind == "string" and not (isinstance(item, str) and rule["minLength"] <= len(item) <= rule["maxLength"]):
            return False
        if kind == "boolean" and not isinstance(item, bool):
            return False
        if kind == "array" and not (rule["minItems"] <= len(item) <= rule["maxItems"]
                                    and all(isinstance(s, str) and len(s) <= rule["items"]["maxLength"] for s in item)):
            return False
    return True


def _valid(key, text: str) -> bool:
    kind, spec = key
    if kind == "json":
        return _json_ok(text, json.loads(spec))
    if kind == "regex":
        return re.fullmatch(spec, text) is not None
    return _ebnf_ok(text)


@pytest.mark.parametrize("batch", ["json", "regex", "ebnf_mixed"])
def test_constrained_greedy_equals_plain_constrained_greedy(report: dict, batch: str) -> None:
    """Each grammar request's output equals plain constrained greedy decoding's, token for token, and
    parses / matches; the request without a grammar gets plain greedy decoding's tokens (a prefix:
    it never ends). With and without overlap (where the next round's grammar barrier advances the
    previous round's matchers)."""
    entry = report["batches"][batch]
    assert "error" not in entry, entry["error"]
    for mode in ("ddtree", "ddtree_overlap"):
        run = entry[mode]
        assert not any(run["aborted"]), (mode, run["aborted"])
        for key, plain, got, finished in zip(entry["keys"], entry["plain"], run["outputs"], run["finished"]):
            if key is None:
                assert got == plain[: len(got)] and len(got) > run["rounds"], (mode, got, plain)
                continue
            assert finished and got == plain, (mode, key, _text(report, got), _text(report, plain))
            assert _valid(key, _text(report, got)), (mode, key, _text(report, got))
        emitted = sum(len(o) for o in run["outputs"][:2])
        assert emitted > 2 * run["rounds"], run  # more than one token a round per request


def test_accepted_paths_leave_the_first_child_chain(report: dict) -> None:
    """The drafter ranks a decoy (the target's unconstrained choice, which the grammar forbids) first at
    every third depth: accepted paths then go through second children, under the grammar masks."""
    for entry in report["batches"].values():
        assert "error" not in entry, entry["error"]
        assert entry["ddtree"]["off_chain_rounds"] > 0 and entry["ddtree_overlap"]["off_chain_rounds"] > 0, entry


def test_sampled_outputs_stay_inside_the_grammar(report: dict) -> None:
    """Temperature 0.8: each node is drawn from its masked row, so every grammar request finishes with
    an output its grammar accepts (an unmasked draw would abort it in the result processor)."""
    for entry in report["batches"].values():
        assert "error" not in entry, entry["error"]
        run = entry["ddtree_sampled"]
        assert not any(run["aborted"]), run["aborted"]
        for key, got, finished in zip(entry["keys"], run["outputs"], run["finished"]):
            if key is not None:
                assert finished and _valid(key, _text(report, got)), (key, _text(report, got))


def test_releases_without_the_tree_grammar_walk_refuse_grammar_requests(release) -> None:
    """Below 0.5.17 (0.5.15 in CI) SGLang has no `build_grammar_vocab_mask` and DFlash's request check
    refuses grammars: DDTREE refuses them with the capability's message; from 0.5.17 it serves them."""
    version, site, python = release
    probe = ("import types\n"
             "import torchvision_stand_in\ntorchvision_stand_in.install(('xgrammar',))  # GPU / serving packages\n"
             "from sglang.srt.speculative.ddtree.requests import validate_ddtree_request\n"
             "params = types.SimpleNamespace(json_schema=None, regex='a+', ebnf=None, structural_tag=None)\n"
             "algo = types.SimpleNamespace(is_ddtree=lambda: True)\n"
             "print(repr(validate_ddtree_request(algo, types.SimpleNamespace(sampling_params=params))))\n")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                          env=_env(site, HELPERS), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    want = None if Version(version) >= SERVES_GRAMMARS else CAPABILITIES["grammar"].refusal
    assert done.stdout.strip().splitlines()[-1] == repr(want)
