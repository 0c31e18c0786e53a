"""The project's tools, run as modules from the repository root (`python -m scripts.gpu.matrix ...`).

bench: benchmarks; gpu: checks on a GPU machine; offchain: the off-chain oracle pair; rig: gpurig bundles;
train: the trained model pair; dev: tests, mutation, evidence, kernel compile checks; investigations:
one-off measurements whose findings live in docs/. The shell entry points sit beside them.
"""
