"""scripts/gpu/grammar_check.py's engine side with a stand-in engine (the GPU runs the real one): what
each config asks of the engine, what is written, and that the engine is shut down on every path."""

from __future__ import annotations

import json
import sys
import types

import pytest

from scripts.gpu import grammar_check


class FakeEngine:
    instances: list["FakeEngine"] = []

    def __init__(self, fail: bool = False, **kwargs) -> None:
        self.kwargs, self.fail, self.calls, self.shut = kwargs, fail, [], False
        FakeEngine.instances.append(self)

    def generate(self, input_ids, sampling_params):
        if self.fail:
            raise RuntimeError("engine died")
        self.calls.append(sampling_params)
        return [{"output_ids": [1, 2, 3], "text": "{}", "meta_info": {"finish_reason": {"type": "stop"},
                                                                       "spec_verify_ct": 1}}
                for _ in input_ids]

    def shutdown(self) -> None:
        self.shut = True


@pytest.fixture
def engine(monkeypatch):
    FakeEngine.instances.clear()
    module = types.ModuleType("sglang.srt.entrypoints.engine")
    module.Engine = FakeEngine
    for name in ("sglang", "sglang.srt", "sglang.srt.entrypoints"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.entrypoints.engine", module)
    return module


def _run(tmp_path, **cfg):
    config = dict(target="t", draft="d", seed=0, port=30000, cuda_graph=False, algo="DDTREE", budget=16, name="x",
                  draws=4, **cfg)
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    grammar_check.engine_main(str(tmp_path / "cfg.json"), str(tmp_path / "out.json"))
    return json.loads((tmp_path / "out.json").read_text())


def test_greedy_then_sampled_and_the_engine_shut_down(engine, tmp_path):
    out = _run(tmp_path)
    assert set(out["greedy"]) == {name for name, _ in grammar_check.requests()}
    assert len(out["sampled"]) == 4 and out["tokens_per_round"] == 3.0
    (eng,) = FakeEngine.instances
    assert eng.shut and eng.kwargs["speculative_algorithm"] == "DDTREE" and eng.kwargs["disable_cuda_graph"]


def test_greedy_only_asks_nothing_sampled(engine, tmp_path):
    out = _run(tmp_path, sampled=False)
    (eng,) = FakeEngine.instances
    assert "sampled" not in out and len(eng.calls) == 1 and eng.shut


class FailingEngine(FakeEngine):
    def __init__(self, **kwargs) -> None:
        super().__init__(fail=True, **kwargs)


def test_a_failing_engine_is_shut_down_and_nothing_is_written(engine, tmp_path):
    engine.Engine = FailingEngine
    with pytest.raises(RuntimeError, match="engine died"):
        _run(tmp_path)
    (eng,) = FakeEngine.instances
    assert eng.shut and not (tmp_path / "out.json").exists()
