"""Benchmarks: measured speed, never timed tests.

``timing`` holds the one timing primitive every benchmark uses (warm-up, synchronisation, median
and IQR of many repeats; ``torch.utils.benchmark.Timer`` with all threads on a CPU).
"""
