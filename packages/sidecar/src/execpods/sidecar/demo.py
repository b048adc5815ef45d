"""The demo (placeholder until written)."""

from __future__ import annotations

import argparse


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executors", type=int, default=12)


def run_demo(args: argparse.Namespace) -> int:
    return 0
