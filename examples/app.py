"""An example zsched app: the three promises of the README, run by the compose stack.

    zsched worker examples.app:app --redis redis://127.0.0.1:6379/0 --queue default
"""

from __future__ import annotations

import logging
import os

import zsched

log = logging.getLogger("examples.app")

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL"), queue=os.environ.get("ZSCHED_QUEUE", "default"))


@app.task(name="send_reminder", max_attempts=5, backoff=2.0)
async def send_reminder(payload: dict[str, str]) -> None:
    """Remind a learner 24 hours before class; the run id is class:learner, so it is sent once."""
    run = zsched.current_run()
    log.info("reminder for %s in %s (run %s)", payload.get("learner"), payload.get("class"),
             run.run_id)  # fmt: skip


@app.task(name="build_instructor_report", timeout=600)
def build_instructor_report(payload: dict[str, str] | None) -> None:
    """The nightly report (a recurring rule at 02:00 Europe/Berlin fires it)."""
    log.info("building the instructor report for slot %s", zsched.current_run().scheduled_for)


@app.task(name="sweep_expired_uploads")
def sweep_expired_uploads(payload: object) -> None:
    """Every 10 minutes; a sweep that overlaps the previous one is skipped."""
    log.info("sweeping expired uploads")
