"""StreamSnapshots: each open call's inbox, its encoded messages, its position, the send budget.

The reconcilers' threads hand snapshots, removals and notices to a stream's feed; its coroutine
encodes them once for all streams and sends them within the bytes every stream shares.
"""
