"""What zsched tells operators: Prometheus metrics, the collector, Redis-side counters,
structured logs and tracing.
"""
