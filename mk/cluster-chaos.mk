# Chaos on Redis Cluster (issue "Ride through what production Redis does"): the chaos workload
# on a 3+3 cluster, the master holding the queue SIGKILLed mid-load plus process kills, once
# without and once with durable=True (tests/chaos/chaos_cluster.py; docs/reliability.md).
# The short version runs in `make cluster-test` (tests/cluster/test_cluster_chaos.py).
CLUSTER_CHAOS_ARGS ?=

.PHONY: cluster-chaos

cluster-chaos: venv redis
	$(BIN)/python tests/chaos/chaos_cluster.py $(CLUSTER_CHAOS_ARGS)
	$(BIN)/python tests/chaos/chaos_cluster.py --durable $(CLUSTER_CHAOS_ARGS)
