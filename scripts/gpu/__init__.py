"""The DDTree GPU check: start-up gates, the engine matrix, request refusals, sampling and log-prob checks."""
