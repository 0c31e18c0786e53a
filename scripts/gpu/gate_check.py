"""DDTREE's start-up gates on a patched SGLang's real ServerArgs (GPU machine, after apply).

Prints one `GATE name: PASS|FAIL detail` line per case and an `IMPORT` line for the worker class.
"""

from __future__ import annotations

import traceback

TARGET, DRAFT = "/tmp/models/target_rand", "/tmp/models/draft_rand"
WIDTHS = ("speculative_ddtree_budget", "speculative_ddtree_topk", "speculative_dflash_block_size",
          "speculative_num_draft_tokens")
CASES = [
    # The drafter's block is pinned (third field) only when the verify grows past it.
    ("default budget = block - 1", {}, (7, 7, None, 8)),
    ("budget 32 -> verify width 33", {"speculative_ddtree_budget": 32}, (32, 32, 8, 33)),
    ("budget 1 -> verify width = block", {"speculative_ddtree_budget": 1}, (1, 1, None, 8)),
    ("fa3 refused", {"attention_backend": "fa3"}, "Use --attention-backend triton (the fastest"),
    ("page size 16 accepted", {"page_size": 16}, (7, 7, None, 8)),
    ("topk above budget refused", {"speculative_ddtree_budget": 4, "speculative_ddtree_topk": 5},
     "topk must be between 1 and the budget"),
]


def resolved(args) -> dict:
    """The server args' values after SGLang's own resolution: 0.5.23+ resolves on `resolve_once()` and
    serves the values through `resolved_dict()`; earlier releases resolve in the constructor."""
    if hasattr(args, "resolve_once"):
        args.resolve_once()
        return args.resolved_dict()
    return vars(args)


def main() -> None:
    from sglang.srt.server_args import ServerArgs

    base = dict(model_path=TARGET, speculative_algorithm="DDTREE", speculative_draft_model_path=DRAFT,
                attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
                context_length=1024, mem_fraction_static=0.3)
    args = None
    for name, extra, expect in CASES:
        try:
            got = ServerArgs(**dict(base, **extra))
            widths = tuple(resolved(got)[f] for f in WIDTHS)
            ok = widths == expect
            detail = f"widths {widths}"
            args = args or got
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            ok = isinstance(expect, str) and expect in str(e)
            detail = f"{type(e).__name__}: {e}"
        print(f"GATE {name}: {'PASS' if ok else 'FAIL'} {detail[:300]}", flush=True)
    try:
        from sglang.srt.speculative.ddtree.worker import worker_class

        print(f"IMPORT worker_class -> {worker_class(args).__name__}", flush=True)
    except Exception:  # noqa: BLE001
        print("IMPORT FAILED\n" + traceback.format_exc(), flush=True)


if __name__ == "__main__":
    main()
