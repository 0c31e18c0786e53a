"""Run SGLang's own server-argument resolution on a CPU machine, one cached venv per release.

- `venv_builder.ensure_venv(version, metadata)`: the venv (dependencies only, pinned in
  `requirements-<version>.txt`, torch from the local CPU file), cached in
  $DDTREE_PATCH_VENV_CACHE/<version>.
- `tests/sglang_releases.install_release(version, target)`: the SGLang release alone, for PYTHONPATH.
- `probe.py`: run with the venv's python; prints JSON of resolved speculative settings.
- `torchvision_stand_in`: what lets SGLang import beside a CPU torch.

Warm the cache with `python -m scripts.dev.make_cpu_venv`; the behaviour test is
`pytest -m slow tests/test_serverargs_behaviour.py`.
"""
