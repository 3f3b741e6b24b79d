"""The Celery app, unchanged from a Beat project but for the overlap hook (two lines).

    celery -A proj worker -l info                                   # as before
    zsched celery-bridge proj.celery:app --beat-schedule --dispatch # instead of celery beat
"""

from __future__ import annotations

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

from zsched.integrations.celery import install_overlap_hook

app = Celery("proj", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1"),
             include=["proj.tasks"])  # fmt: skip
app.conf.timezone = "Europe/Berlin"  # required: zsched refuses to guess a zone
app.conf.beat_schedule = {
    "nightly-backup": {
        "task": "proj.tasks.backup_database",
        "schedule": crontab(hour=2, minute=0),
        "options": {"queue": "celery", "expires": 3600},
    },
    "cleanup": {"task": "proj.tasks.cleanup", "schedule": timedelta(minutes=10)},
    "token-refill": {"task": "proj.tasks.refill_tokens", "schedule": 1.0, "args": (10,)},
    "weekly-digest": {
        "task": "proj.tasks.send_digest",
        "schedule": crontab(minute=30, hour=7, day_of_week="mon"),
        "kwargs": {"kind": "weekly"},
    },
}

# Lets a rule with overlap skip/queue know when its Celery task finished (docs/celery.md).
install_overlap_hook(app, os.environ.get("ZSCHED_REDIS_URL"))
