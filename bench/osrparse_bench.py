#!/usr/bin/env python3
"""Times the reference parser, osrparse, on the replays the Rust bench uses.

Usage: python bench/osrparse_bench.py [RUNS]   (default 30; run from anywhere)

Prints, per fixture, the median time of `Replay.from_string` over RUNS runs and the
throughput in input bytes, comparable with `cargo bench -p osurender-core --bench replay`.
"""

import statistics
import sys
import time
from pathlib import Path

from osrparse import Replay

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "replays"
NAMES = ["valid_0", "valid_1", "valid_long"]


def median_seconds(data, runs):
    Replay.from_string(data)  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        Replay.from_string(data)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    for name in NAMES:
        data = (FIXTURES / f"{name}.osr").read_bytes()
        seconds = median_seconds(data, runs)
        print(f"osrparse/{name:<11} median {seconds * 1e3:8.3f} ms  "
              f"{len(data) / seconds / 2**20:6.2f} MiB/s  ({len(data)} bytes, {runs} runs)")


if __name__ == "__main__":
    main()
