#!/usr/bin/env python3
"""Times the reference parser, osrparse, on the replays the Rust bench uses.

Usage: python bench/osrparse_bench.py [--runs N] [--memory] [FILE.osr ...]
(default: 30 runs of the three valid fixtures; run from anywhere, with osrparse installed)

Prints, per file, the median time of `Replay.from_string` over N runs and the throughput in
input bytes, comparable with `cargo bench -p osurender-core --bench replay`. With --memory, also
how far the peak RSS of a fresh process rises while it parses the file once (`peak-rss:` lines,
measured as the Rust bench measures `inspect`: VmHWM, reset after the file is read).
"""

import argparse
import statistics
import subprocess
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


def status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_child(path):
    data = Path(path).read_bytes()
    before = status_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current RSS
    replay = Replay.from_string(data)
    print(status_kib("VmHWM:") - before, len(replay.replay_data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--peak-rss-of", help=argparse.SUPPRESS)
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args()
    if args.peak_rss_of:
        return peak_rss_child(args.peak_rss_of)
    files = args.files or [FIXTURES / f"{name}.osr" for name in NAMES]
    for path in files:
        data = path.read_bytes()
        # Long files take seconds per parse: fewer runs keep the total bounded.
        runs = args.runs if len(data) < 2**20 else max(3, args.runs // 10)
        seconds = median_seconds(data, runs)
        print(f"osrparse/{path.stem:<15} median {seconds * 1e3:10.3f} ms  "
              f"{len(data) / seconds / 2**20:7.2f} MiB/s  ({len(data)} bytes, {runs} runs)")
        if args.memory:
            child = subprocess.run([sys.executable, __file__, "--peak-rss-of", str(path)],
                                   capture_output=True, text=True, check=True)
            kib, frames = child.stdout.split()
            print(f"peak-rss: {path.stem} ({len(data)} bytes) osrparse: +{kib} KiB "
                  f"(accepted, {frames} frames)")


if __name__ == "__main__":
    main()
