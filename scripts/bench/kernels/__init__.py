"""The kernel benchmark (`python -m scripts.bench.kernels`): one module per kernel's sections, timing.py
shared, __main__.py the command line; the sections' figures are in docs/kernels.md."""
