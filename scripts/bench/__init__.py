"""Benchmarks: end-to-end (plain / DFLASH / DDTREE), per-kernel, verify attention, round profile, audit speed."""
