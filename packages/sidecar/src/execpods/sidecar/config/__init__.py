"""The sidecar's settings: every package's slice composed into one `Settings`, Spark's properties
files and keys, and the effective values with their origin.
"""
