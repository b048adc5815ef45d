"""What a running sidecar tells its operators: the telemetry hub, metrics, health and logs.

Everything observable reports to one hub (`hub.Telemetry`); Prometheus metrics and cluster health
are listeners of it. Nothing here decides anything about allocation.
"""
