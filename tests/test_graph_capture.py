"""`graph_capture.install_tree_mask_capture`: DDTREE target runners capture target verify with the
tree mask buffer attached (so replay reads each round's ancestor mask), and nothing else changes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

OWN = object()

pytest.importorskip("torch")
pytest.importorskip("triton")


def _runner(cls, *, ddtree: bool, draft: bool):
    runner = cls.__new__(cls)
    algo = SimpleNamespace(is_ddtree=lambda: ddtree) if ddtree is not None else SimpleNamespace()
    runner.model_runner = SimpleNamespace(is_draft_worker=draft, spec_algorithm=algo)
    runner.buffers = SimpleNamespace(custom_mask=object())
    return runner


@pytest.fixture(scope="module")
def runner_cls(dropin):
    capture = dropin("graph_capture")
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    # SGLang's own method builds a fresh dummy verify input per capture; DFlash's has no mask.
    # (0 tokens: no spec info; 1: an input that already carries a mask, as EAGLE's can.)
    DecodeCudaGraphRunner.get_spec_info = lambda self, num_tokens: (
        None if num_tokens == 0 else SimpleNamespace(custom_mask=OWN if num_tokens == 1 else None, tokens=num_tokens))
    capture.install_tree_mask_capture()
    wrapped = DecodeCudaGraphRunner.get_spec_info
    capture.install_tree_mask_capture()  # idempotent: not wrapped twice
    assert DecodeCudaGraphRunner.get_spec_info is wrapped
    return DecodeCudaGraphRunner


def test_a_ddtree_target_captures_with_the_mask_buffer(runner_cls):
    runner = _runner(runner_cls, ddtree=True, draft=False)
    spec = runner.get_spec_info(16)
    assert spec.custom_mask is runner.buffers.custom_mask and spec.tokens == 16


@pytest.mark.parametrize("ddtree, draft", [(True, True), (False, False), (None, False)],
                         ids=["ddtree-draft-runner", "dflash-target", "no-is_ddtree"])
def test_other_runners_keep_the_dummy_input(runner_cls, ddtree, draft):
    assert _runner(runner_cls, ddtree=ddtree, draft=draft).get_spec_info(16).custom_mask is None


def test_no_spec_info_and_existing_masks_pass_through(runner_cls):
    runner = _runner(runner_cls, ddtree=True, draft=False)
    assert runner.get_spec_info(0) is None
    assert runner.get_spec_info(1).custom_mask is OWN
