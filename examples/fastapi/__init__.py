"""FastAPI example: class reminders 24 h before the class (docs/fastapi.md)."""
