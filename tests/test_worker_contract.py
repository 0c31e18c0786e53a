"""The DDTree worker adapters (patches/adapters.py) against each release's own worker contract (patches/contract.py).

Fast tests: the checker on small class/scheduler sources, so each kind of drift it must catch is
caught. Slow tests: every release with DFLASH installed from the index, `apply`'d into a `--target`
site, and the check the server runs at worker creation run on that patched tree (static: ast of
the release's call sites and DFlash classes, no torch) -- the v2 adapter on 0.5.14+, the v1 adapter
(worker and verify input) on 0.5.11-0.5.13; and drift planted into a patched tree is caught.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from ddtree_patch.data.releases import WITH_DFLASH
from ddtree_patch.locate import locate
from ddtree_patch.worker_fit import contract_warnings
from patches import adapters, contract

REPO = Path(__file__).resolve().parents[1]

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
ADAPTER_SPEC = adapters.Adapter("pkg.tree", "Tree", "pkg.base", "Worker")


def _tree(tmp_path: Path, base: str = BASE, adapter: str = ADAPTER, scheduler: str = SCHEDULER) -> Path:
    files = {"pkg/__init__.py": "", "pkg/base.py": base, "pkg/tree.py": adapter,
             "pkg/contract.py": "", "sglang/srt/managers/scheduler.py": scheduler}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


def test_a_fitting_adapter_has_no_problems(tmp_path):
    assert contract.problems(ADAPTER_SPEC, _tree(tmp_path)) == []


@pytest.mark.parametrize("head", [b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n# (c) Se\xf1or\n"])
def test_sources_are_read_as_python_reads_them(tmp_path, head):
    """A UTF-8 BOM or a PEP 263 coding cookie (SGLang may ship either): read as on import, not as plain utf-8."""
    tree = _tree(tmp_path)
    for rel in ("pkg/base.py", "pkg/tree.py", "sglang/srt/managers/scheduler.py"):
        (tree / rel).write_bytes(head + (tree / rel).read_bytes())
    assert contract.problems(ADAPTER_SPEC, tree) == []


def test_a_release_the_check_cannot_read_is_a_warning_not_a_crash(tmp_path):
    """After apply has written the patch, an unreadable release file (bytes that are not UTF-8, no
    cookie) makes the check a warning: the patch is in place, so apply still reports success."""
    import shutil

    from ddtree_patch.model import Install

    ddtree = tmp_path / "sglang/srt/speculative/ddtree"
    ddtree.mkdir(parents=True)
    for name in ("contract.py", "adapters.py"):
        shutil.copy(REPO / "patches" / name, ddtree / name)
    (tmp_path / "sglang/srt/speculative/dflash_worker_v2.py").write_bytes(b"# caf\xe9\nclass DFlashWorkerV2: pass\n")
    warnings = contract_warnings(Install(tmp_path, tmp_path / "sglang", None, "0.5.23"))
    assert len(warnings) == 1 and "could not read the patched SGLang" in warnings[0], warnings
    assert "dflash_worker_v2.py does not decode as Python source" in warnings[0], warnings


def test_a_scheduler_keyword_from_a_kwargs_dict_is_caught(tmp_path):
    scheduler = SCHEDULER.replace('kwargs["on_publish"] = print', 'kwargs["on_publish"] = print\n        kwargs["pp_proxy_tensors"] = None')
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, scheduler=scheduler))
    assert found == ["call at sglang/srt/managers/scheduler.py:9 passes `pp_proxy_tensors=`, "
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
                     "requires `grammar_barrier`, which the base's `grammar_barrier` makes optional",
                     "call at sglang/srt/managers/scheduler.py:9 does not pass the required `grammar_barrier` "
                     "(Tree.forward_batch_generation)"]


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


MIXIN = '''
class Setup:
    def set_up(self):
        self.size = self.device * 2
        return self.helper(self.size)
'''


def test_what_the_adapter_s_own_mixin_reads_and_calls_on_the_base_is_checked(tmp_path):
    """A set-up mixin shared by the workers reads DFlash's attributes too: a base that stops setting
    one, or renames a method the mixin calls, is caught and named by the mixin."""
    adapter = ADAPTER.replace("from pkg.base import Worker\n", "from pkg.base import Worker\nfrom pkg.setup import Setup\n")
    adapter = adapter.replace("class Tree(Worker):", "class Tree(Setup, Worker):")
    root = _tree(tmp_path, adapter=adapter)
    (root / "pkg" / "setup.py").write_text(textwrap.dedent(MIXIN))
    assert contract.problems(ADAPTER_SPEC, root) == []
    (root / "pkg" / "base.py").write_text(textwrap.dedent(BASE.replace('self.device = "cpu"', "pass").replace(
        "def helper(", "def helper_renamed(")))
    found = contract.problems(ADAPTER_SPEC, root)
    assert "Setup reads self.device (line 4), which Worker neither sets nor defines" in found
    assert "Setup calls Worker.helper (line 5), which this release does not have" in found


def test_no_scheduler_call_is_a_problem_not_a_pass(tmp_path):
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, scheduler="class Scheduler:\n    pass\n"))
    assert found == ["no call of Worker.forward_batch_generation on `self` or `model_worker` / `draft_worker` in "
                     "sglang/srt/managers or DFlash's modules: the release no longer calls it, so "
                     "Tree.forward_batch_generation would be bypassed"]


# A v1-shaped family: DFlash's worker calls its own hook and its verify input's `verify`; the
# adapter overrides both (the verify input as a companion class, reached as `verify_input`).
V1_BASE = '''
class Info:
    def verify(self, *, batch, logits_output, page_size):
        return batch


class Worker:
    def forward_batch_generation(self, batch):
        self._prepare(batch, None)
        verify_input = Info()
        return verify_input.verify(batch=batch, logits_output=None, page_size=self.page_size)

    def _prepare(self, batch, draft_input):
        self.page_size = 1
'''
V1_ADAPTER = '''
from pkg.base import Info, Worker


class TreeInfo(Info):
    def verify(self, *, batch, logits_output, page_size):
        return super().verify(batch=batch, logits_output=logits_output, page_size=page_size)


class Tree(Worker):
    def _prepare(self, batch, draft_input):
        super()._prepare(batch, draft_input)
        return self.page_size
'''
V1_SPEC = adapters.Adapter(
    "pkg.tree", "Tree", "pkg.base", "Worker", hooks=("_prepare",),
    companions=(adapters.Adapter("pkg.tree", "TreeInfo", "pkg.base", "Info", hooks=("verify",), receivers=("verify_input",)),),
)  # fmt: skip


def _v1(tmp_path: Path, base: str = V1_BASE, adapter: str = V1_ADAPTER) -> list[str]:
    return contract.problems(V1_SPEC, _tree(tmp_path, base=base, adapter=adapter, scheduler="class Scheduler:\n    pass\n"))


def test_a_fitting_hook_family_has_no_problems(tmp_path):
    assert _v1(tmp_path) == []


def test_a_release_call_to_a_companion_hook_binds_to_the_override(tmp_path):
    adapter = V1_ADAPTER.replace("def verify(self, *, batch, logits_output, page_size):", "def verify(self, *, batch, logits_output):")
    assert _v1(tmp_path, adapter=adapter) == [
        "TreeInfo.verify vs Info.verify: takes no keyword `page_size`, which the base takes",
        "call at pkg/base.py:11 passes `page_size=`, which it does not take (TreeInfo.verify)",
    ]


def test_a_hook_the_release_no_longer_calls_is_caught(tmp_path):
    base = V1_BASE.replace("self._prepare(batch, None)", "self._prepare_renamed(batch, None)")
    assert _v1(tmp_path, base=base) == [
        "no call of Worker._prepare on `self` or `model_worker` / `draft_worker` in sglang/srt/managers or "
        "DFlash's modules: the release no longer calls it, so Tree._prepare would be bypassed"
    ]


def test_a_hook_the_adapter_does_not_override_is_caught(tmp_path):
    adapter = V1_ADAPTER.replace("def _prepare(self, batch, draft_input):", "def _prepare_tree(self, batch, draft_input):")
    found = _v1(tmp_path, adapter=adapter)
    assert found[0] == "Tree does not override Worker._prepare", found


def test_a_super_call_that_no_longer_binds_is_caught(tmp_path):
    base = V1_BASE.replace("def _prepare(self, batch, draft_input):", "def _prepare(self, batch, draft_input, *, mode):")
    found = _v1(tmp_path, base=base)
    assert "Tree line 12 calls Worker._prepare: it does not pass the required `mode`" in found, found
    assert "Tree._prepare vs Worker._prepare: takes no keyword `mode`, which the base takes" in found, found


# A stand-in for the verify input while DFlash's `forward_batch_generation` runs (v1's ChainInputV1).
STAND_IN_ADAPTER = V1_ADAPTER + """

class Placeholder(Info):
    def verify(self, *, batch, logits_output, page_size):
        return batch
"""
STAND_IN_SPEC = adapters.Adapter(
    "pkg.tree", "Tree", "pkg.base", "Worker", hooks=("_prepare",),
    companions=(adapters.Adapter("pkg.tree", "Placeholder", "pkg.base", "Info", hooks=(), receivers=("verify_input",),
                                 stands_in=("pkg.base", "forward_batch_generation")),),
)  # fmt: skip


def _stand_in(tmp_path: Path, base: str = V1_BASE) -> list[str]:
    site = _tree(tmp_path, base=base, adapter=STAND_IN_ADAPTER, scheduler="class Scheduler:\n    pass\n")
    return contract.problems(STAND_IN_SPEC, site)


def test_a_stand_in_fits_where_the_release_builds_the_base_by_its_module_name(tmp_path):
    assert _stand_in(tmp_path) == []


@pytest.mark.parametrize("build", [
    "verify_input = self.info_class()",  # no longer through the module's name
    "Info = type(self).info_class\n        verify_input = Info()",  # a local name shadows it
    "from pkg.other import Info\n        verify_input = Info()",  # a local import shadows it
])
def test_a_stand_in_the_release_no_longer_builds_by_name_is_caught(tmp_path, build):
    base = V1_BASE.replace("verify_input = Info()", build)
    assert _stand_in(tmp_path, base=base) == [
        "pkg.base.forward_batch_generation no longer builds Info(...) through its module-level name, "
        "so Placeholder cannot stand in for it there"]


def test_a_stand_in_whose_release_module_is_gone_is_caught(tmp_path):
    spec = STAND_IN_SPEC.companions[0]
    moved = adapters.Adapter(spec.module, spec.name, spec.base_module, spec.base_name, hooks=(),
                             receivers=spec.receivers, stands_in=("pkg.gone", "forward_batch_generation"))
    site = _tree(tmp_path, base=V1_BASE, adapter=STAND_IN_ADAPTER, scheduler="class Scheduler:\n    pass\n")
    assert contract.problems(moved, site) == ["pkg.gone is not in this SGLang, so Placeholder cannot stand in there"]


# One adapter for two release shapes: `_commit` takes `bonus_tokens` (BASE) or `verified_id`.
GUARDED = ADAPTER.replace(
    "from pkg.base import Worker\n",
    'from pkg.base import Worker\nfrom pkg.contract import release_takes\n\n'
    'OLD = release_takes(Worker._commit, "verified_id")\n',
).replace(
    "        return self._commit(bonus_tokens=self.rooted, new_seq_lens=self.mine)",
    "        if OLD:\n"
    "            return self._commit(verified_id=self.rooted, new_seq_lens=self.mine)\n"
    "        else:\n"
    "            return self._commit(bonus_tokens=self.rooted, new_seq_lens=self.mine)",
)
OLD_BASE = BASE.replace("def _commit(self, *, bonus_tokens,", "def _commit(self, *, verified_id,")


@pytest.mark.parametrize("base", [BASE, OLD_BASE])
def test_a_guarded_branch_is_checked_only_where_the_release_runs_it(tmp_path, base):
    assert "if OLD:" in GUARDED
    assert contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=base, adapter=GUARDED)) == []


def test_the_branch_a_release_runs_is_still_checked(tmp_path):
    adapter = GUARDED.replace("_commit(verified_id=self.rooted,", "_commit(verified_id=self.rooted, extra=1,")
    assert contract.problems(ADAPTER_SPEC, _tree(tmp_path, adapter=adapter)) == []  # not run by BASE
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=OLD_BASE, adapter=adapter))
    assert found == ["Tree line 18 calls Worker._commit: it passes `extra=`, which it does not take"]


def test_a_release_matching_neither_branch_is_caught(tmp_path):
    base = BASE.replace("def _commit(self, *, bonus_tokens,", "def _commit(self, *, seed_tokens,")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, base=base, adapter=GUARDED))
    assert found == ["Tree line 20 calls Worker._commit: it passes `bonus_tokens=`, which it does not take",
                     "Tree line 20 calls Worker._commit: it does not pass the required `seed_tokens`"]


def test_a_guard_on_a_vanished_method_or_of_another_shape_is_caught(tmp_path):
    adapter = GUARDED.replace("release_takes(Worker._commit,", "release_takes(Worker._commit_renamed,")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, adapter=adapter))
    # Unresolved, the guard prunes nothing: both branches are checked and one must fail.
    assert found[0] == "release guard OLD (line 5) reads Worker._commit_renamed, which this release does not have", found
    assert "Tree line 18 calls Worker._commit: it passes `verified_id=`, which it does not take" in found
    adapter = GUARDED.replace('release_takes(Worker._commit, "verified_id")', "release_takes(Worker._commit, NAME)")
    found = contract.problems(ADAPTER_SPEC, _tree(tmp_path, adapter=adapter))
    assert found[0] == 'release guard at line 5 is not `NAME = release_takes(Class.method, "param")`', found


def test_the_runtime_guard_agrees_with_the_static_one():
    def commit(self, *, verified_id, new_seq_lens, **extra):
        return verified_id

    assert contract.release_takes(commit, "verified_id") and contract.release_takes(commit, "extra")
    assert not contract.release_takes(commit, "bonus_tokens")
    assert contract._arg_names(ast.parse(textwrap.dedent(inspect.getsource(commit))).body[0]) == {
        "self", "verified_id", "new_seq_lens", "extra"}


STATE_BASE = BASE + """

class Carry:
    seed: int

    def __init__(self):
        self.done = None
"""
STATE_ADAPTER = ADAPTER.replace(
    "        self.helper(self.device, flag=True)\n",
    "        self.helper(self.device, flag=True)\n"
    "        draft_input = batch.spec_info\n"
    "        draft_input.done = draft_input.seed\n",
)
STATE_SPEC = adapters.Adapter("pkg.tree", "Tree", "pkg.base", "Worker",
                              state=(adapters.State(("draft_input",), "pkg.base", "Carry"),))


def test_state_reads_and_sets_are_checked_against_the_state_class(tmp_path):
    assert contract.problems(STATE_SPEC, _tree(tmp_path, base=STATE_BASE, adapter=STATE_ADAPTER)) == []
    base = STATE_BASE.replace("    seed: int\n", "    verified: int\n").replace("self.done = None", "self.finished = None")
    found = contract.problems(STATE_SPEC, _tree(tmp_path, base=base, adapter=STATE_ADAPTER))
    assert found == ["Tree sets draft_input.done (line 15), which Carry neither sets nor defines",
                     "Tree reads draft_input.seed (line 15), which Carry neither sets nor defines"]


def test_a_guarded_conditional_expression_prunes_too(tmp_path):
    """`a if not G else b` as `_seed_tokens` writes it: only the operand the release runs is read."""
    adapter = GUARDED.replace(
        "        if OLD:\n",
        "        draft_input = batch.spec_info\n"
        "        draft_input.seed if not OLD else draft_input.verified\n"
        "        if OLD:\n",
    )
    old_base = OLD_BASE + STATE_BASE[len(BASE):].replace("seed: int", "verified: int")
    for base in (STATE_BASE, old_base):
        assert contract.problems(STATE_SPEC, _tree(tmp_path, base=base, adapter=adapter)) == [], base
    found = contract.problems(STATE_SPEC, _tree(tmp_path, base=STATE_BASE.replace("seed: int", "other: int"), adapter=adapter))
    assert found == ["Tree reads draft_input.seed (line 18), which Carry neither sets nor defines"]


def _sig(source: str) -> contract.Signature:
    return contract.Signature.of(ast.parse(source).body[0])


@pytest.mark.parametrize(
    "base, override, problem",
    [
        ("def f(self, a, *, b=1): pass", "def f(self, a, *, b=1): pass", None),
        ("def f(self, a, *, b=1): pass", "def f(self, a, *args, **kwargs): pass", None),
        ("def f(self, a, *, b=1): pass", "def f(self, a): pass", "takes no keyword `b`, which the base takes"),
        ("def f(self, a, *, b=1): pass", "def f(self, a, *, b): pass", "requires `b`, which the base makes optional"),
        ("def f(self, a, c=2): pass", "def f(self, a): pass", "takes no parameter for the base's `c`"),
        # A renamed positional fits positional callers; a caller naming it is a call problem (below).
        ("def f(self, a): pass", "def f(self, x): pass", None),
        ("def f(self, a): pass", "def f(self, a, *, extra): pass", "requires `extra`, which the base does not take"),
        ("def f(self, **kw): pass", "def f(self): pass", "takes no **kwargs, which the base takes"),
    ],
)
def test_override_fit(base, override, problem):
    found = contract.overrides_fit(_sig(override), _sig(base))
    assert found == ([] if problem is None else [problem])


def test_a_call_binds_or_says_why():
    sig = _sig("def f(self, a, b=1, *, c): pass")
    assert contract.call_fits(sig, 1, {"c"}, complete=True) == []
    assert contract.call_fits(sig, 3, {"c"}, complete=True) == ["passes 3 positional arguments, it takes 2"]
    assert contract.call_fits(sig, 1, {"c", "d"}, complete=True) == ["passes `d=`, which it does not take"]
    assert contract.call_fits(sig, 0, {"c"}, complete=True) == ["does not pass the required `a`"]
    assert contract.call_fits(sig, 0, {"c"}, complete=False) == []  # `**x` may carry `a`
    assert contract.call_fits(_sig("def f(self, x): pass"), 0, {"a"}, complete=True) == [
        "passes `a=`, which it does not take", "does not pass the required `x`"]


def _apply(site: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
@pytest.mark.parametrize("version", WITH_DFLASH)
def test_the_adapter_fits_each_release_after_apply(fresh_release, version):
    """0.5.11-0.5.13: the v1 adapter fits; 0.5.14-0.5.23: the v2 adapter fits (0.5.14 through its
    `verified_id` branch, the others through `bonus_tokens`)."""
    site = fresh_release(version)
    done = _apply(site)
    warnings = contract_warnings(locate(None, site, False))
    adapter = contract.adapter_for(site)
    assert adapter is (adapters.V1 if Version(version) < Version("0.5.14") else adapters.V2), (version, adapter)
    found = contract.problems(adapter, site)
    assert found == [], f"{adapter.name} drifted from SGLang {version}:\n" + "\n".join(found)
    assert warnings == () and "warning: DDTREE" not in done.stdout


@pytest.mark.slow
def test_a_release_file_with_a_bom_is_patched_and_reported_as_applied(fresh_release, tmp_path):
    """scheduler.py (edited by the patch and read by the contract check) and the DFlash worker start
    with a UTF-8 BOM: apply succeeds and says so, status is patched, revert is byte-exact."""
    import shutil

    site = fresh_release("0.5.23")
    for rel in ("sglang/srt/managers/scheduler.py", "sglang/srt/speculative/dflash_worker_v2.py"):
        (site / rel).write_bytes(b"\xef\xbb\xbf" + (site / rel).read_bytes())
    pristine = Path(shutil.copytree(site, tmp_path / "pristine"))
    done = _apply(site)
    assert done.stdout.startswith("applied") and "Traceback" not in done.stderr and "warning:" not in done.stdout
    assert (site / "sglang/srt/managers/scheduler.py").read_bytes().startswith(b"\xef\xbb\xbf# Copyright")
    assert contract.problems(adapters.V2, site) == []
    cli = [sys.executable, "-m", "ddtree_patch"]
    status = subprocess.run([*cli, "status", "--target", str(site)], capture_output=True, text=True, cwd=REPO)
    assert status.returncode == 0 and status.stdout.startswith("state: patched"), status.stdout + status.stderr
    subprocess.run([*cli, "revert", "--target", str(site)], check=True, capture_output=True, cwd=REPO)
    files = lambda root: {p.relative_to(root): p.read_bytes() for p in (root / "sglang").rglob("*") if p.is_file()}
    assert files(site) == files(pristine)


@pytest.mark.slow
def test_drift_of_the_v1_adapter_is_caught_and_warned(fresh_release):
    """Each kind of drift planted into a patched 0.5.12 (the adapter's overrides, a super() call,
    an attribute, DFlash's call of a hook, how DFlash builds the input a stand-in replaces) is found,
    and `apply`'s warning (worker_fit) names it."""
    site = fresh_release("0.5.12")
    _apply(site)
    assert contract.problems(adapters.V1, site) == []
    adapter = site / "sglang/srt/speculative/ddtree/worker_v1.py"
    text = adapter.read_text()
    for old, new in [
        ("self, *, hidden_states: torch.Tensor, lm_head: Any, chunk_size: int = 256",
         "self, *, hidden_states: torch.Tensor, lm_head: Any"),
        ("def verify(\n        self, *, batch: ScheduleBatch, logits_output: Any, page_size: int\n    )",
         "def verify(self, *, batch: ScheduleBatch, logits_output: Any)"),
        ("self.use_compact_draft_cache", "self.use_compact_cache"),
        ("super().prepare_for_verify(batch, page_size, build_custom_mask=False)",
         "super().prepare_for_verify(batch, page_size, custom_mask=False)"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    adapter.write_text(text)
    release = site / "sglang/srt/speculative/dflash_worker.py"
    call = "self._prepare_for_speculative_decoding(batch, draft_input)"
    assert release.read_text().count(call) == 1
    built = "        verify_input = DFlashVerifyInput(\n"  # the chain input ChainInputV1 stands in for
    assert release.read_text().count(built) == 1
    release.write_text(release.read_text().replace(call, "self._prepare_renamed(batch, draft_input)")
                       .replace(built, "        verify_input = self._verify_input_class(\n"))

    drift = "\n".join(contract.problems(adapters.V1, site))
    assert ("DDTreeWorkerV1._greedy_sample_from_vocab_parallel_head vs DFlashWorker._greedy_sample_from_vocab_parallel_head: "
            "takes no keyword `chunk_size`, which the base takes") in drift, drift
    assert "DDTreeVerifyInputV1.verify vs DFlashVerifyInput.verify: takes no keyword `page_size`, which the base takes" in drift
    assert "dflash_worker.py:" in drift and "passes `page_size=`, which it does not take (DDTreeVerifyInputV1.verify)" in drift
    assert "DDTreeWorkerV1 reads self.use_compact_cache (line" in drift and "which DFlashWorker neither sets nor defines" in drift
    assert "calls DFlashVerifyInput.prepare_for_verify: it passes `custom_mask=`, which it does not take" in drift
    assert "the release no longer calls it, so DDTreeWorkerV1._prepare_for_speculative_decoding would be bypassed" in drift
    assert ("sglang.srt.speculative.dflash_worker._prepare_for_speculative_decoding no longer builds "
            "DFlashVerifyInput(...) through its module-level name, so ChainInputV1 cannot stand in for it there") in drift
    warnings = contract_warnings(locate(None, site, False))
    assert len(warnings) == 1 and "does not fit the worker contract of SGLang 0.5.12" in warnings[0], warnings
    assert "chunk_size" in warnings[0] and "use_compact_cache" in warnings[0]


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
    found = contract.problems(adapters.V2, site)
    assert "DDTreeWorkerV2.forward_batch_generation vs DFlashWorkerV2.forward_batch_generation: " \
           "takes no parameter for the base's `grammar_barrier`" in found
    assert any("passes `grammar_barrier=`" in p and "scheduler.py" in p for p in found)
