"""A typical Celery project whose beat_schedule zsched runs (docs/celery.md)."""
