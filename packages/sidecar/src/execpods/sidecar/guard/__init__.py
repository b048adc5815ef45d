"""The sidecar as a privilege boundary: who may call it (TLS, tokens), what a caller's pod
template may ask for, and whether the sidecar's own service account may do its work.
"""
