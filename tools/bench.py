#!/usr/bin/env python3
"""Run every package's benchmark and print its figures (python3 tools/dev.py bench).

Each benchmark is a module with a `main()`; they run one after another in fresh interpreters so
one cannot warm or disturb the next.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys

MODULES = (
    "execpods.devtools.bench.core",
    "execpods.devtools.bench.kubesim",
    "execpods.devtools.bench.k8s",
    "execpods.devtools.bench.sidecar",
    "execpods.devtools.bench.time_to_target",
    "execpods.devtools.bench.congestion",
    "execpods.devtools.bench.servers",
    "execpods.devtools.bench.plugin_path",
    "execpods.devtools.bench.crashloop",
)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run every package's benchmark.")
    parser.add_argument(
        "--only", help="run only the benchmark whose module contains this (e.g. core, k8s)"
    )
    args, passthrough = parser.parse_known_args()
    if passthrough and not args.only:
        parser.error("extra arguments go to one benchmark: name it with --only")
    failed = []
    for module in MODULES:
        if args.only and args.only.replace("-", "_") not in module:
            continue
        if importlib.util.find_spec(module) is None:
            print(f"== {module}: not present, skipped", flush=True)
            continue
        print(f"== {module}", flush=True)
        command = [sys.executable, "-m", module, *passthrough]
        if subprocess.run(command, check=False).returncode != 0:
            failed.append(module)
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
