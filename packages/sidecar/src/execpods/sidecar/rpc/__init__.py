"""The `execpods.v1.ExecutorAllocator` servicer and the mapping of its messages onto core values."""
