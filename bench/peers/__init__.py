"""Side-by-side peers (make bench-peers): BullMQ, Celery, saq, arq, RQ and the bare minimum.

Each module is one contender (bench/contender.py) plus the entry point of its consumer
process. They run in bench/peers/.venv, never in zsched's own environment.
"""
