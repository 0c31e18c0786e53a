"""The DDTree worker adapters against each release's own worker contract (patches/contract.py).

Fast tests: the checker on small class/scheduler sources, so each kind of drift it must catch is
caught. Slow test: every release with DFLASH installed from the index, `apply`'d into a `--target`
site, and the check the server runs at worker creation run on that patched tree (static: ast of
the release's scheduler call sites and DFlash worker methods, no torch).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddtree_patch.data.releases import WITH_DFLASH
from ddtree_patch.locate import locate
from ddtree_patch.worker_fit import contract_warnings
from patches import contract

REPO = Path(__file__).resolve().parents[1]
# Releases whose DFlash worker the v2 adapter knows not to fit, with the drift that says so.
# 0.5.14's DFlashDraftInputV2 carries `verified_id` plus verify-done events where 0.5.15+ carries
# `bonus_tokens`: a different state contract, refused at start rather than guessed at.
KNOWN_DRIFT = {"0.5.14": "_make_next_draft_input_decode: it passes `bonus_tokens=`"}

BASE = '''
class Root:
    def __init__(self):
        self.rooted = 1

    def helper(self, x, *, flag=False):
        return x


class Worker(Root):
    def __init__(self, server_args, gpu_id):
        super().__init__()
        self.device = "cpu"

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None):
        return batch

    def _commit(self, *, bonus_tokens, new_seq_lens):
        return bonus_tokens
'''
ADAPTER = '''
from pkg.base import Worker


class Tree(Worker):
    def __init__(self, server_args, *args, **kwargs):
        super().__init__(server_args, *args, **kwargs)
        self.mine = 2

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None):
        if batch:
            return super().forward_batch_generation(batch, on_publish=on_publish)
        self.helper(self.device, flag=True)
        return self._commit(bonus_tokens=self.rooted, new_seq_lens=self.mine)
'''
SCHEDULER = '''
class Scheduler:
    def run_batch(self, batch, pp_proxy_tensors=None):
        kwargs = {}
        kwargs["on_publish"] = print
        if batch:
            kwargs["grammar_barrier"] = print
        self.model_worker.forward_batch_generation(batch, **kwargs)
        self.model_worker.forward_batch_generation(batch)
'''
ADAPTER_SPEC = contract.Adapter("pkg.tree", "Tree", "pkg.base", "Worker")


def _tree(tmp_path: Path, base: str = BASE, adapter: str = ADAPTER, scheduler: str = SCHEDULER) -> Path:
    files = {"pkg/__init__.py": "", "pkg/base.py": base, "pkg/tree.py": adapter,
             "sglang/srt/managers/scheduler.py": scheduler}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


def test_a_fitting_adapter_has_no_problems(tmp_path):
    assert contract.problems(ADAPTER_SPEC, _tree(tmp_path)) == []


def test_a_scheduler_keyword_from_a_kwargs_dict_is_caught(tmp_path):
    scheduler = SCHEDULER.replace('kwargs["on_publish"] = print', 'kwargs["on_publish"] = print\n        kwargs["pp_proxy_tensors"] = None')
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, scheduler=scheduler))
    assert found == ["scheduler call at sglang/srt/managers/scheduler.py:9 passes `pp_proxy_tensors=`, "
                     "which it does not take (Tree.forward_batch_generation)"]


def test_a_kwargs_dict_built_from_a_non_literal_is_not_trusted(tmp_path):
    scheduler = SCHEDULER.replace("kwargs = {}", "kwargs = make()")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, scheduler=scheduler))
    assert len(found) == 1 and "cannot read its keywords" in found[0]


def test_a_new_base_parameter_is_caught(tmp_path):
    base = BASE.replace("grammar_barrier=None):", "grammar_barrier=None, pp_proxy_tensors=None):")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=base))
    assert found == ["Tree.forward_batch_generation vs Worker.forward_batch_generation: "
                     "takes no parameter for the base's `pp_proxy_tensors`"]


def test_an_optional_base_parameter_made_required_is_caught(tmp_path):
    adapter = ADAPTER.replace("on_publish=None, grammar_barrier=None):", "on_publish=None, *, grammar_barrier):")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, adapter=adapter))
    assert found == ["Tree.forward_batch_generation vs Worker.forward_batch_generation: "
                     "requires `grammar_barrier`, which the base's `grammar_barrier` makes optional"]


def test_a_renamed_base_method_keyword_is_caught(tmp_path):
    base = BASE.replace("def _commit(self, *, bonus_tokens,", "def _commit(self, *, verified_id,")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=base))
    assert found == ["Tree line 14 calls Worker._commit: it passes `bonus_tokens=`, which it does not take",
                     "Tree line 14 calls Worker._commit: it does not pass the required `verified_id`"]


def test_a_vanished_base_method_or_attribute_is_caught(tmp_path):
    base = BASE.replace("self.rooted = 1", "pass").replace("def helper(", "def helper_renamed(")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=base))
    assert found == ["Tree calls Worker.helper (line 13), which this release does not have",
                     "Tree reads self.rooted (line 14), which Worker neither sets nor defines"]


def test_no_scheduler_call_is_a_problem_not_a_pass(tmp_path):
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, scheduler="class Scheduler:\n    pass\n"))
    assert found == ["no call of `model_worker.forward_batch_generation` in sglang/srt/managers: "
                     "the scheduler's call moved"]


@pytest.mark.slow
@pytest.mark.parametrize("version", WITH_DFLASH)
def test_the_adapter_fits_each_release_after_apply(fresh_release, version):
    site = fresh_release(version)
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = contract_warnings(locate(None, site, False))
    adapter = contract.adapter_for(site)
    if adapter is None:  # 0.5.11-0.5.13 until a v1 adapter is listed in contract.ADAPTERS
        assert version < "0.5.14" and warnings and "has no worker adapter" in warnings[0], warnings
        assert "has no worker adapter" in done.stdout
        return
    found = contract.problems(adapter, site)
    if version in KNOWN_DRIFT:
        assert found and all(KNOWN_DRIFT[version] in p or "_make_next_draft_input_decode" in p for p in found), found
        assert "does not fit the worker contract" in done.stdout  # `apply` warned
        return
    assert found == [], f"{adapter.name} drifted from SGLang {version}:\n" + "\n".join(found)
    assert warnings == () and "warning: DDTREE" not in done.stdout


@pytest.mark.slow
def test_the_check_catches_the_measured_0_5_17_crash(fresh_release):
    """The adapter as it was before this check (no `grammar_barrier` / `pp_proxy_tensors`), on the
    release where it crashed in the first batch: refused by the check instead."""
    site = fresh_release("0.5.17")
    subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                   capture_output=True, check=True, cwd=REPO, timeout=900)
    worker = site / "sglang/srt/speculative/ddtree/worker_v2.py"
    text = worker.read_text()
    old = text[text.index("        on_publish: Optional[Callable] = None,"):text.index("    ) -> GenerationBatchResult:")]
    worker.write_text(text.replace(old, "        on_publish: Optional[Callable] = None,\n"))
    found = contract.problems(contract.V2, site)
    assert "DDTreeWorkerV2.forward_batch_generation vs DFlashWorkerV2.forward_batch_generation: " \
           "takes no parameter for the base's `grammar_barrier`" in found
    assert any("passes `grammar_barrier=`" in p and "scheduler.py" in p for p in found)
