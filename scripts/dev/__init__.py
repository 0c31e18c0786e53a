"""Development tools: mutation testing, the evidence renderer, CPU venvs, sm_90 kernel compile checks."""
