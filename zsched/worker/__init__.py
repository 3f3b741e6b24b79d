"""The worker: registered tasks, handles, payload types, the consume/ack loops, recovery
of dead workers' runs, limits and cancellation.

`Worker` (worker.py) owns its collaborators, each with its own state: `Runner` (runner.py)
executes deliveries (`Delivery`, delivery.py), `Writer` (writer.py) buffers and writes their
outcomes, `Holds` (recovery.py) renews, reclaims and hands back the entries held, and the
loops (loops.py: ReadLoop, FlushLoop, HoldLoop, each with run() and tick()) drive them. They
share one frozen `WorkerContext` (context.py), built from the queue's QueueContext.
"""
