"""Just enough of SGLang's module surface for `worker_v2` to import on a CPU (test harness only),
and the sites the drop-ins are loaded from in tests."""

import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]

STUB_MODULES = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/managers/schedule_batch.py": "class ScheduleBatch:\n    pass\n",
    "sglang/srt/managers/scheduler.py": (
        "from dataclasses import dataclass\n"
        "from typing import Any\n\n\n"
        "@dataclass\n"
        "class GenerationBatchResult:\n"
        "    logits_output: Any = None\n"
        "    next_token_ids: Any = None\n"
        "    accept_lens: Any = None\n"
        "    can_run_cuda_graph: bool = False\n"
        "    next_draft_input: Any = None\n"
        "    speculative_num_draft_tokens: Any = None\n"
        "    new_seq_lens: Any = None\n"
    ),
    "sglang/srt/model_executor/__init__.py": "",
    "sglang/srt/model_executor/forward_batch_info.py": (
        "import enum\n\n\n"
        "class CaptureHiddenMode(enum.Enum):\n    NULL = 0\n    FULL = 1\n\n\n"
        "class ForwardMode(enum.Enum):\n    TARGET_VERIFY = 1\n\n\n"
        "class ForwardBatch:\n    def __init__(self, **kw):\n        self.__dict__.update(kw)\n"
    ),
    "sglang/srt/model_executor/runner/__init__.py": "",
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py": (
        "class DecodeCudaGraphRunner:\n    def get_spec_info(self, num_tokens):\n        return None\n"
    ),
    "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/dflash_info.py": (
        "from dataclasses import dataclass\n"
        "from typing import Any\n\n\n"
        "@dataclass\n"
        "class DFlashVerifyInput:\n"
        "    draft_token: Any\n    positions: Any\n    draft_token_num: int\n    topk: int = 1\n"
        "    custom_mask: Any = None\n    capture_hidden_mode: Any = None\n"
    ),
    "sglang/srt/speculative/dflash_info_v2.py": "class DFlashDraftInputV2:\n    pass\n",
    "sglang/srt/speculative/dflash_utils.py": "def apply_dflash_verify_logits_adjustments(**kw):\n    pass\n",
    # The signatures worker_v2's release guards read, as 0.5.15 has them.
    "sglang/srt/speculative/dflash_worker_v2.py": (
        "class DFlashWorkerV2:\n"
        "    def _make_next_draft_input_decode(self, *, bonus_tokens, new_seq_lens):\n        pass\n\n"
        "    def _update_target_mamba_state_after_verify(self, *, batch, seq_lens_pre_verify, commit_lens):\n"
        "        pass\n"
    ),
    "sglang/srt/speculative/spec_info.py": "class SpeculativeAlgorithm:\n    DFLASH = 'DFLASH'\n",
    # The two constructors a GDN target's tree verify wraps (patches/tree_recurrence.py), as their topk reads.
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/attention/__init__.py": "",
    "sglang/srt/layers/attention/hybrid_linear_attn_backend.py": (
        "class MambaAttnBackendBase:\n"
        "    def __init__(self, model_runner):\n"
        "        self.topk = model_runner.server_args.speculative_eagle_topk or 0\n"
    ),
    "sglang/srt/mem_cache/__init__.py": "",
    "sglang/srt/mem_cache/memory_pool.py": (
        "class MambaPool:\n"
        "    def __init__(self, *, speculative_eagle_topk=None):\n"
        "        self.speculative_eagle_topk = speculative_eagle_topk\n"
    ),
}


def add_dropin(site: Path) -> Path:
    """Our drop-ins and kernels copied into `site` where `apply` puts them."""
    dropin = site / "sglang/srt/speculative/ddtree"
    shutil.copytree(REPO / "patches", dropin, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "kernels", dropin / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def make_stub_site(site: Path) -> Path:
    """`site` holding the stub sglang with our drop-ins and kernels where `apply` puts them."""
    for rel, text in STUB_MODULES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return add_dropin(site)


def bare_site(site: Path) -> Path:
    """`site` holding only the empty sglang packages the drop-ins live in, and the drop-ins: a module
    that imports anything else of SGLang fails to load there."""
    for pkg in ("sglang", "sglang/srt", "sglang/srt/speculative"):
        (site / pkg).mkdir(parents=True, exist_ok=True)
        (site / pkg / "__init__.py").write_text("")
    return add_dropin(site)


def _sglang_modules() -> list[str]:
    return [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]


@contextmanager
def sglang_from(site: Path) -> Iterator[None]:
    """Inside the block `sglang` imports from `site`; afterwards the modules it loaded leave
    `sys.modules` and any sglang modules loaded before are back."""
    saved = {name: sys.modules[name] for name in _sglang_modules()}
    with pytest.MonkeyPatch.context() as patch:  # sys.path as it was afterwards
        patch.syspath_prepend(str(site))
        try:
            yield
        finally:
            for name in _sglang_modules():
                del sys.modules[name]
            sys.modules.update(saved)
