"""One benchmark module per package (`python -m execpods.devtools.bench.NAME`); `tools/bench.py`
runs them all. They print figures; they are commands, never timed tests."""
