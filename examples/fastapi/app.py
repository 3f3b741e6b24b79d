"""A FastAPI app that schedules a reminder 24 h before a class, moves it when the class
moves, and cancels it. Run: `uvicorn examples.fastapi.app:api` (from the repo root), with
the worker and a dispatcher of examples/fastapi/tasks.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, field_validator

from zsched import RunNotFound
from zsched.integrations.starlette import zsched_app, zsched_lifespan

from .tasks import zapp

BEFORE = timedelta(hours=24)
#: The zsched.AsyncApp the lifespan opened (App.aio()).
Zsched = Annotated[Any, Depends(zsched_app)]
api = FastAPI(title="class reminders", lifespan=zsched_lifespan(zapp))


class ClassTime(BaseModel):
    starts_at: datetime

    @field_validator("starts_at")
    @classmethod
    def aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("starts_at needs a time zone offset")
        return v


def run_id(class_id: str, learner: str) -> str:
    # One reminder per learner and class: a retried POST is a duplicate, not a second e-mail.
    return f"reminder:{class_id}:{learner}"


async def _schedule(zs: Any, class_id: str, learner: str, body: ClassTime,
                    on_conflict: str = "keep") -> Any:  # fmt: skip
    rid = run_id(class_id, learner)
    payload = {"class_id": class_id, "learner": learner,
               "class_starts_at": body.starts_at.isoformat()}  # fmt: skip
    return await zs.enqueue("send_reminder", payload, run_at=body.starts_at - BEFORE,
                            run_id=rid, on_conflict=on_conflict)  # fmt: skip


def _answer(got: Any, body: ClassTime) -> dict[str, Any]:
    return {"run_id": str(got), "remind_at": (body.starts_at - BEFORE).isoformat(),
            "duplicate": got.duplicate}  # fmt: skip


@api.post("/classes/{class_id}/reminders/{learner}", status_code=201)
async def schedule_reminder(class_id: str, learner: str, body: ClassTime,
                            zs: Zsched) -> dict[str, Any]:  # fmt: skip
    """Remind `learner` 24 h before the class starts."""
    return _answer(await _schedule(zs, class_id, learner, body), body)


@api.put("/classes/{class_id}/reminders/{learner}")
async def reschedule_reminder(class_id: str, learner: str, body: ClassTime,
                              zs: Zsched) -> dict[str, Any]:  # fmt: skip
    """The class moved: move its reminder, with the new class time in its payload (enqueue's
    "replace" swaps the waiting run's payload and due time in one script). A reminder already
    sent, or being sent, is not replaced: 409."""
    got = await _schedule(zs, class_id, learner, body, on_conflict="replace")
    if got.duplicate:
        raise HTTPException(409, f"reminder {got} is no longer waiting")
    return _answer(got, body)


@api.delete("/classes/{class_id}/reminders/{learner}", status_code=204)
async def cancel_reminder(class_id: str, learner: str, zs: Zsched) -> None:
    """The learner left the class: no reminder."""
    if not await zs.cancel(run_id(class_id, learner)):
        raise HTTPException(409, "the reminder is not waiting (sent, running or unknown)")


@api.get("/classes/{class_id}/reminders/{learner}")
async def reminder_status(class_id: str, learner: str,
                          zs: Zsched) -> dict[str, Any]:  # fmt: skip
    """Where the reminder is: scheduled, ready, running, done, dead or cancelled."""
    try:
        run = await zs.get_run(run_id(class_id, learner))
    except RunNotFound:
        raise HTTPException(404, "no such reminder") from None
    return {"run_id": run.run_id, "state": run.state,
            "remind_at": run.run_at.isoformat() if run.run_at else None}  # fmt: skip
