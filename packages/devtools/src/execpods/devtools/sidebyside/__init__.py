"""The same scenarios through real Spark 4.3's own allocator and through execpods, compared.

`harness` runs them (``python -m execpods.devtools.sidebyside``), `scenarios` says what they do,
`run` steers one run on a simulated cluster, `record` reads what each run did to executor pods
from the simulator's request log, `compare` pairs the two runs and applies `allowlist.toml`.
"""
