"""`verify_graphs`: the target's verify graph runner per `auto` width, on the CPU (capturing needs a
GPU, so the runner class is a recorder with the keywords SGLang's has from 0.5.14; the release's
own class and the worker's capture through it are checked in tests/test_scheduler_path_auto.py)."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def vg(dropin):
    return dropin("verify_graphs")


class Runner:
    """A graph runner built per width the way the release's is: records the config it saw."""

    def __init__(self, model_runner, *, attn_backend=None, speculative_num_steps=None,
                 speculative_num_draft_tokens=None) -> None:
        self.width = speculative_num_draft_tokens
        self.saw = (model_runner.server_args.speculative_num_draft_tokens, model_runner.attn_backend is attn_backend)
        model_runner.built.append(self)


class OneWidthRunner:
    def __init__(self, model_runner) -> None:  # SGLang before 0.5.14: no per-width keywords
        model_runner.built.append(self)


def target(runner_cls=Runner, width=65):
    model_runner = types.SimpleNamespace(server_args=types.SimpleNamespace(speculative_num_draft_tokens=width),
                                         device="cpu", built=[], init_new_workspace=False)
    model_runner.attn_backend = types.SimpleNamespace(width=width)
    model_runner.decode_cuda_graph_runner = runner_cls.__new__(runner_cls)

    def backend(init_new_workspace=False):
        assert init_new_workspace  # a workspace of its own, as SGLang's adaptive EAGLE asks
        model_runner.init_new_workspace = "changed by the backend"
        return types.SimpleNamespace(width=model_runner.server_args.speculative_num_draft_tokens)

    model_runner._get_attention_backend = backend
    return model_runner


def test_each_narrower_width_gets_its_runner_and_backend_built_at_that_width(vg):
    model_runner = target()
    own = model_runner.attn_backend, model_runner.decode_cuda_graph_runner
    graphs = vg.WidthGraphs(model_runner, 65)
    graphs.capture({33, 9, 65, 17}, model_runner.server_args, cap_bytes=2**30)
    assert [r.width for r in model_runner.built] == [9, 17, 33]  # narrowest first, the target's own not again
    assert all(r.saw == (r.width, True) for r in model_runner.built)
    assert {w: r.attn_backend.width for w, r in graphs.runners.items()} == {9: 9, 17: 17, 33: 33}
    assert graphs.widths == {9, 17, 33, 65} and graphs.trimmed == []
    assert (model_runner.attn_backend, model_runner.decode_cuda_graph_runner) == own
    assert model_runner.server_args.speculative_num_draft_tokens == 65
    assert model_runner.init_new_workspace is False


def test_a_round_swaps_in_its_width_and_puts_the_target_s_own_back_even_on_error(vg):
    model_runner = target()
    own = model_runner.attn_backend, model_runner.decode_cuda_graph_runner
    graphs = vg.WidthGraphs(model_runner, 65)
    graphs.capture({17}, model_runner.server_args, cap_bytes=2**30)
    with graphs.use(17) as backend:
        assert backend is model_runner.attn_backend is graphs.runners[17].attn_backend
        assert model_runner.decode_cuda_graph_runner.width == 17
    with graphs.use(65) as backend:  # the widest is the target's own
        assert (backend, model_runner.decode_cuda_graph_runner) == own
    with pytest.raises(RuntimeError), graphs.use(17):
        raise RuntimeError("verify failed")
    assert (model_runner.attn_backend, model_runner.decode_cuda_graph_runner) == own


def test_the_memory_cap_trims_the_wider_widths_with_its_reason(vg, monkeypatch):
    model_runner = target()
    free = iter([10, 7, 7, 3, 3, 0])  # each capture takes 3 or 4 bytes
    monkeypatch.setattr(vg, "_free_bytes", lambda device: next(free))
    graphs = vg.WidthGraphs(model_runner, 65)
    graphs.capture({9, 17, 33, 48}, model_runner.server_args, cap_bytes=7)
    assert sorted(graphs.runners) == [9, 17] and graphs.used_bytes == 7
    assert graphs.trimmed == [(33, "graph memory cap DDTREE_AUTO_GRAPH_MEM_GB=6.51926e-09 reached"),
                              (48, "graph memory cap DDTREE_AUTO_GRAPH_MEM_GB=6.51926e-09 reached")]


def test_a_runner_of_one_width_captures_nothing_more(vg):
    model_runner = target(OneWidthRunner)
    graphs = vg.WidthGraphs(model_runner, 65)
    graphs.capture({9, 17}, model_runner.server_args, cap_bytes=2**30)
    assert graphs.runners == {} and model_runner.built == []
    assert graphs.trimmed == [(9, "this SGLang's graph runner captures one width only"),
                              (17, "this SGLang's graph runner captures one width only")]


@pytest.mark.parametrize(("raw", "want"), [("", 4 * 2**30), ("0.5", 2**29), ("0", 0)])
def test_the_cap_comes_from_the_environment(dropin, raw, want):
    assert dropin("budget_ladder").mem_cap_bytes({"DDTREE_AUTO_GRAPH_MEM_GB": raw}) == want


@pytest.mark.parametrize("raw", ["-1", "lots", "nan", "inf"])
def test_a_bad_cap_is_refused_by_name(dropin, raw):
    with pytest.raises(ValueError, match="DDTREE_AUTO_GRAPH_MEM_GB must be a number"):
        dropin("budget_ladder").mem_cap_bytes({"DDTREE_AUTO_GRAPH_MEM_GB": raw})
