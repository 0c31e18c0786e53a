"""Send requests through an installed SGLang's own request intake (CPU); print JSON per case.

Runs INSIDE a CPU venv built by `venv_builder`, with the (patched) release on PYTHONPATH. It
calls the release's real `Scheduler.handle_generate_request` with real `Req` / `SamplingParams`
objects; only the scheduler instance (and the tensor-parallel rank query) is a stand-in holding the attributes the intake reads before
the speculative request check. Anything else the intake touches raises `PastRequestCheck`, which
is how a request that the check let through is recognised (the real `validate_dflash_request` is
wrapped to prove the check ran). Modules the scheduler imports for serving only (fastapi,
uvicorn, setproctitle, xgrammar, torchvision) are permissive stand-ins where absent.

    python request_probe.py --algorithm DDTREE --cases '{"plain": {}, "logprob": {"return_logprob": true}}'
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import traceback
from types import SimpleNamespace

import torchvision_stand_in

# Imported by the scheduler module for serving, never called by its request intake.
SERVING_ONLY = ("fastapi", "uvicorn", "setproctitle", "xgrammar")


class PastRequestCheck(Exception):
    """The intake went on past the speculative request check (the request was not refused)."""


class _SchedulerStandIn:
    """The scheduler's state: the given attributes; its methods are the real class's."""

    def __init__(self, cls: type, spec_algorithm, known: dict, queued: list):
        self.__dict__.update(known)
        self._cls = cls
        self.spec_algorithm = spec_algorithm
        self.init_req_max_new_tokens = lambda req: None
        self._add_request_to_queue = lambda req, *a, **k: queued.append(req)

    def __getattr__(self, name):
        method = getattr(self._cls, name, None)
        if inspect.isfunction(method):
            return method.__get__(self)
        raise PastRequestCheck(name)


class _RequestStandIn:
    """A tokenized request: the fields given, the release's own defaults for the others (None for
    a field without one), so no release-specific constructor signature is needed."""

    def __init__(self, fields: dict, defaults: dict):
        self.__dict__.update(fields)
        self._defaults = defaults

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._defaults.get(name)


def _field_defaults(cls: type) -> dict:
    """Defaults of a dataclass (0.5.11-0.5.2x) or a msgspec Struct (newer io_struct)."""
    if dataclasses.is_dataclass(cls):
        fields, missing = dataclasses.fields(cls), (dataclasses.MISSING,)
    else:
        import msgspec

        fields, missing = msgspec.structs.fields(cls), (msgspec.NODEFAULT,)
    defaults = {}
    for field in fields:
        if field.default not in missing:
            defaults[field.name] = field.default
        elif field.default_factory not in missing:
            defaults[field.name] = field.default_factory()
    return defaults


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", required=True)
    parser.add_argument("--cases", required=True, help="JSON: name -> request fields (sampling params under 'sampling')")
    args = parser.parse_args()
    torchvision_stand_in.install(SERVING_ONLY)

    import sglang
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers import scheduler as scheduler_module
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    checked = []
    real_check = scheduler_module.validate_dflash_request

    def counted(*a, **k):
        result = real_check(*a, **k)
        checked.append(result)
        return result

    scheduler_module.validate_dflash_request = counted
    from sglang.srt.managers import schedule_batch
    # One rank; no process group on a CPU probe (the query by release: a function, then a context).
    schedule_batch.get_tensor_model_parallel_rank = lambda: 0
    schedule_batch.get_parallel = lambda: SimpleNamespace(tp_rank=0)
    known = dict(
        server_args=SimpleNamespace(enable_session_radix_cache=False, disaggregation_bootstrap_port=8998,
                                    elastic_ep_backend=None),  # 0.5.16 reads it here; 0.5.18+ through get_exec()
        model_config=SimpleNamespace(hf_eos_token_id=None, vocab_size=1000),
        disaggregation_mode=DisaggregationMode.NULL, metrics_reporter=SimpleNamespace(enable_metrics=False),
        tokenizer=None, dllm_config=None, enable_overlap=False, session_controller={},
        tree_cache=SimpleNamespace(supports_prefix_sharing=lambda: False),
        kv_events_publisher=SimpleNamespace(enable_kv_cache_events=False),
    )
    if hasattr(scheduler_module, "get_exec"):  # 0.5.2x: run-time config published at server start
        scheduler_module.get_exec = lambda: SimpleNamespace(moe=SimpleNamespace(elastic_ep_backend=None))
    algorithm = SpeculativeAlgorithm.from_string(args.algorithm)
    report = {"sglang_version": sglang.__version__, "sglang_file": sglang.__file__, "cases": {}}
    for name, fields in json.loads(args.cases).items():
        fields = dict(fields)
        sampling = SamplingParams(max_new_tokens=8, **fields.pop("sampling", {}))
        defaults = dict(rid=name, input_text=None, input_ids=[1, 2, 3], sampling_params=sampling,
                        return_logprob=False, top_logprobs_num=0, stream=False, bootstrap_port=8998)
        recv = _RequestStandIn({**defaults, **fields}, _field_defaults(TokenizedGenerateReqInput))
        queued: list = []
        checked.clear()
        try:
            stand_in = _SchedulerStandIn(scheduler_module.Scheduler, algorithm, known, queued)
            scheduler_module.Scheduler.handle_generate_request(stand_in, recv)
            outcome = {"outcome": "returned"}
        except PastRequestCheck as past:
            outcome = {"outcome": "served" if checked == [None] else "not-checked", "next": str(past)}
        except Exception as error:  # noqa: BLE001 - reported per case
            outcome = {"outcome": "error", "error": f"{type(error).__name__}: {error}",
                       "traceback": traceback.format_exc()[-3000:]}
        if queued:  # the scheduler's abort path: the request is queued only to send its error back
            finish = queued[0].to_finish or queued[0].finished_reason
            outcome = {"outcome": "aborted", "message": finish.to_json()["message"] if finish else None}
        outcome["checked"] = len(checked)
        report["cases"][name] = outcome
    print(json.dumps(report))


if __name__ == "__main__":
    main()
