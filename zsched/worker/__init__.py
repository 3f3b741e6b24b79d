"""The worker: registered tasks, handles, payload types, the consume/ack loops, recovery
of dead workers' runs, limits and cancellation.
"""
