"""execpods.devtools: the demo, its sample driver and the benchmarks; development only.

Nothing that ships imports this package (an import-linter contract says so), and it may import
everything: the simulator, the adapter, the sidecar and the client.
"""
