"""gpurig bundles, built on the CPU machine: slimmed wheels, FlashInfer modules, Triton compile checks."""
