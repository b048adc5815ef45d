"""The real Kubernetes API server for the proof tiers: pinned cached Go builds
(:mod:`.gobuild`) and a loopback etcd + kube-apiserver + kube-controller-manager (:mod:`.server`).
"""
