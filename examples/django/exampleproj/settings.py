"""A minimal project that runs its django.tasks on zsched (docs/django.md).

Django 6 has django.tasks built in; Django 4.2-5.2 use the django-tasks backport app."""

from __future__ import annotations

import os

import django

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
USE_TZ = True
TIME_ZONE = "Europe/Berlin"
ROOT_URLCONF = "exampleproj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "zsched.integrations.django",  # manage.py zsched_dispatcher / zsched_worker
    "shop",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.insert(0, "django_tasks")  # the backport

TASKS = {
    "default": {
        "BACKEND": "zsched.integrations.django.ZschedBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "REDIS_URL": os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"),
            "QUEUE_PREFIX": os.environ.get("SHOP_QUEUE_PREFIX", "shop-"),
            "ENQUEUE_ON_COMMIT": os.environ.get("SHOP_ENQUEUE_ON_COMMIT", "") == "1",
            "PERIODIC_TASKS": {
                "nightly-report": {"task": "shop.tasks.nightly_report", "cron": "0 2 * * *",
                                   "tz": "Europe/Berlin", "kwargs": {"kind": "sales"}},
                "heartbeat": {"task": "shop.tasks.heartbeat", "every": 1},
            },
        },
    }
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
