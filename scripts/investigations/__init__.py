"""One-off measurements behind findings in docs/kernels.md and docs/sampling.md; kept to re-run, not tests."""
