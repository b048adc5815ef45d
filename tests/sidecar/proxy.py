"""The cuttable TCP proxy lives in devtools (the fault suite cuts driver streams with it too)."""

from execpods.devtools.proxy import CuttableProxy

__all__ = ["CuttableProxy"]
