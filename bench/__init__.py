"""zsched's benchmark suite: `python -m bench` (make bench) and `python -m bench.peers`.

Every scenario starts its own redis-server (tests/redis_server.py), is bounded in time and
stops by itself. Workloads are written once against a small `Contender` interface
(bench/contender.py) so zsched, the bare-minimum script and each peer run the same ones.
"""
