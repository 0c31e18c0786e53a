"""DEV ONLY, delete once `ddtree-patch apply` lands: hand-patch an installed SGLang 0.5.15 for DDTREE.

Used by scripts/gpu_check.sh only when the patcher's `apply` is not available yet, so that the
worker and kernels can be proven on the GPU machine meanwhile. It makes exactly the edits the
engine is specified to make on 0.5.15 (enum member, widened is_dflash, is_ddtree, create_worker
branch, server-arg fields, the validation hook, the two DFlash name tuples) and copies the drop-ins.

usage: python dev_patch_sglang_0515.py SITE_PACKAGES REPO_ROOT
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

EDITS = {
    "srt/speculative/spec_info.py": [
        ("    DFLASH = auto()\n", "    DFLASH = auto()\n    DDTREE = auto()\n"),
        (
            "    def is_dflash(self) -> bool:\n        return self == SpeculativeAlgorithm.DFLASH\n",
            "    def is_dflash(self) -> bool:\n"
            "        return self in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE)\n\n"
            "    def is_ddtree(self) -> bool:\n        return self == SpeculativeAlgorithm.DDTREE\n",
        ),
        (
            "        if self.is_dflash():\n            # V2 worker",
            "        if self.is_ddtree():\n"
            "            from sglang.srt.speculative.ddtree.worker import worker_class\n\n"
            "            return worker_class(server_args)\n\n"
            "        if self.is_dflash():\n            # V2 worker",
        ),
        (
            "            _handle_dflash(server_args)\n",
            "            _handle_dflash(server_args)\n"
            "            from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args\n\n"
            "            validate_ddtree_server_args(server_args)\n",
        ),
    ],
    "srt/server_args.py": [
        (
            '    speculative_accept_threshold_single: A[\n',
            '    speculative_ddtree_budget: A[Optional[int], "DDTREE tree budget."] = None\n'
            '    speculative_ddtree_topk: A[Optional[int], "DDTREE per-depth candidate cap."] = None\n'
            '    speculative_ddtree_allow_hybrid_unsafe: A[bool, "DDTREE on hybrid targets."] = False\n'
            '    speculative_accept_threshold_single: A[\n',
        ),
    ],
    "srt/speculative/spec_utils.py": [
        ('in ("STANDALONE", "DFLASH"):', 'in ("STANDALONE", "DFLASH", "DDTREE"):'),
    ],
    "srt/arg_groups/speculative_hook.py": [
        ('not in ("EAGLE3", "DFLASH"):', 'not in ("EAGLE3", "DFLASH", "DDTREE"):'),
    ],
}


def main(site: Path, repo: Path) -> None:
    pkg = site / "sglang"
    for rel, edits in EDITS.items():
        path = pkg / rel
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"dev patch: expected one {old[:50]!r} in {rel}, found {text.count(old)}")
            text = text.replace(old, new)
        path.write_text(text)
    dropin = pkg / "srt/speculative/ddtree"
    shutil.rmtree(dropin, ignore_errors=True)
    (dropin / "kernels").mkdir(parents=True)
    for src, dst in ((repo / "patches", dropin), (repo / "kernels", dropin / "kernels")):
        for f in src.glob("*.py"):
            shutil.copy(f, dst / f.name)
    print(f"dev patch applied to {pkg}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
