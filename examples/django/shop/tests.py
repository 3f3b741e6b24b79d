"""Django's test runner, against a real redis-server (ZSCHED_REDIS_URL): the zsched backend
behind django.tasks, under Django 6 or the django-tasks backport."""

from __future__ import annotations

import asyncio
import functools
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.test import SimpleTestCase, TransactionTestCase, override_settings
from django.utils import timezone

from shop import tasks
from zsched import RunNotFound
from zsched.integrations.django.compat import TaskResultStatus, signals
from zsched.integrations.django.processes import backend_named
from zsched.integrations.django.runner import worker_app

TRACE = redis.Redis.from_url(settings.TASKS["default"]["OPTIONS"]["REDIS_URL"])


def run_due(queue_name: str = "default") -> int:
    """One dispatcher pass and one worker pass over a Django queue; returns runs executed."""
    backend = backend_named("default")
    app = worker_app(backend, queue_name)

    async def once() -> int:
        d, w = app.dispatcher(), app.worker()
        try:
            await d.tick()
            return int(await w.tick())
        finally:
            await d.close()
            await w.close()

    return asyncio.run(once())


class BackendTests(SimpleTestCase):
    def setUp(self) -> None:
        TRACE.delete("shop-test:receipts", "shop-test:newsletters", "shop-test:not-a-task")

    def test_enqueue_runs_on_the_zsched_worker_and_get_result_has_the_return_value(self):
        result = tasks.send_receipt.enqueue(42, email="ada@example.com")
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(tasks.send_receipt.get_result(result.id).status, TaskResultStatus.READY)
        self.assertEqual(run_due(), 1)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, {"order": 42, "sent_to": "ada@example.com"})
        self.assertEqual((result.args, result.kwargs), ([42], {"email": "ada@example.com"}))
        self.assertEqual(result.attempts, 1)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(TRACE.lrange("shop-test:receipts", 0, -1), [b"42:ada@example.com"])

    async def test_aenqueue_and_aget_result_from_async_code(self):
        result = await tasks.send_receipt.aenqueue(11, email="async@example.com")
        self.assertEqual((await tasks.send_receipt.aget_result(result.id)).status, "READY")
        from asgiref.sync import sync_to_async

        await sync_to_async(run_due)()
        await result.arefresh()
        self.assertEqual(result.return_value, {"order": 11, "sent_to": "async@example.com"})

    def test_run_after_goes_into_the_delayed_set(self):
        when = timezone.now() + timedelta(hours=1)
        result = tasks.send_receipt.using(run_after=when).enqueue(7, email="b@example.com")
        run = backend_named("default").app_for("default").get_run(result.id)
        self.assertEqual(run.state, "scheduled")
        self.assertAlmostEqual(run.run_at.timestamp(), when.timestamp(), places=2)
        run_due()  # the queue is shared by the tests: judge this run, not the pass's count
        self.assertEqual(backend_named("default").app_for("default").get_run(result.id).state,
                         "scheduled")
        self.assertEqual(tasks.send_receipt.get_result(result.id).status, TaskResultStatus.READY)
        backend_named("default").app_for("default").cancel(result.id)

    def test_a_failing_task_is_failed_with_its_error(self):
        result = tasks.charge.enqueue(-5)
        run_due()
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class_path, "builtins.ValueError")
        self.assertIn("cannot charge -5", result.errors[0].traceback)
        with self.assertRaises(ValueError):
            result.return_value  # noqa: B018 (Django raises for a failed task)

    def test_context_and_async_tasks_run(self):
        charged, warmed = tasks.charge.enqueue(10), tasks.warm_cache.enqueue("k")
        self.assertEqual(run_due(), 2)
        self.assertEqual(tasks.charge.get_result(charged.id).return_value, "charged 10 (attempt 1)")
        self.assertEqual(tasks.warm_cache.get_result(warmed.id).return_value, "K")

    def test_queue_names_map_to_zsched_queues(self):
        result = tasks.send_newsletter.enqueue(3)
        backend = backend_named("default")
        self.assertEqual(backend.app_for("emails").queue, backend.zsched_queue("emails"))
        self.assertEqual(backend.app_for("emails").get_run(result.id).state, "scheduled")
        # "default" is shared by the tests (a retry of another test's run may come due in
        # it under load): judge this run, not that pass's count.
        run_due("default")
        self.assertEqual(TRACE.lrange("shop-test:newsletters", 0, -1), [])
        self.assertEqual(backend.app_for("emails").get_run(result.id).state, "scheduled")
        self.assertEqual(run_due("emails"), 1)
        self.assertEqual(TRACE.lrange("shop-test:newsletters", 0, -1), [b"3"])

    def test_priorities_are_refused_because_zsched_has_none(self):
        backend = backend_named("default")
        self.assertFalse(backend.supports_priority)
        self.assertTrue(backend.supports_defer and backend.supports_get_result)
        with self.assertRaisesRegex(Exception, "priority"):
            tasks.send_receipt.using(priority=10).enqueue(1, email="x")

    def test_the_worker_runs_only_django_tasks_never_a_path_from_the_wire(self):
        app = worker_app(backend_named("default"), "default")
        app.enqueue("shop.tasks.not_a_task", {"args": [], "kwargs": {}}, run_id="forged")
        run_due()
        self.assertEqual(app.get_run("forged").state, "dead")
        self.assertIn("not_a_task", app.get_run("forged").dead_reason or "")
        self.assertEqual(TRACE.llen("shop-test:not-a-task"), 0)

    def test_django_signals_are_sent(self):
        seen: list[tuple[str, str]] = []

        def note(name):
            return lambda sender, task_result, **kw: seen.append((name, task_result.status))

        handlers = {s: note(n) for n, s in (("enqueued", signals.task_enqueued),
                    ("started", signals.task_started), ("finished", signals.task_finished))}  # fmt: skip
        for s, h in handlers.items():
            s.connect(h)
        try:
            tasks.send_receipt.enqueue(1, email="s@example.com")
            run_due()
        finally:
            for s, h in handlers.items():
                s.disconnect(h)
        self.assertEqual([n for n, _ in seen], ["enqueued", "started", "finished"])
        self.assertEqual(seen[-1][1], TaskResultStatus.SUCCESSFUL)

    def test_periodic_tasks_from_settings_are_synced_when_a_dispatcher_starts(self):
        backend = backend_named("default")
        self.assertEqual(backend.declare_periodic(), {"default": ["nightly-report", "heartbeat"]})
        app = backend.app_for("default")
        app.sync_schedules()  # what Dispatcher.run does first
        rules = {i.schedule_id: i for i in app.schedules()}
        self.assertEqual(sorted(rules), ["heartbeat", "nightly-report"])
        self.assertEqual(app.sync_schedules().get("created", []), [])  # a restart: no change


def _with_options(**options: object) -> dict[str, object]:
    tasks_setting = {k: dict(v) for k, v in settings.TASKS.items()}
    tasks_setting["default"]["OPTIONS"] = {**tasks_setting["default"]["OPTIONS"], **options}
    return tasks_setting


class RetryTests(SimpleTestCase):
    def test_with_max_attempts_a_failed_attempt_is_retried_and_its_error_kept(self):
        with override_settings(TASKS=_with_options(MAX_ATTEMPTS=2)):
            result = tasks.flaky_once.enqueue()
            run_due()
            result.refresh()
            self.assertEqual(result.status, TaskResultStatus.READY)  # waiting for its retry
            self.assertEqual(result.errors[0].exception_class_path, "builtins.ConnectionError")
            deadline = time.monotonic() + 30  # the retry's backoff is about a second
            while result.status != TaskResultStatus.SUCCESSFUL and time.monotonic() < deadline:
                run_due()
                result.refresh()
            self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 2))
            self.assertEqual((result.attempts, len(result.errors)), (2, 1))


class OnCommitTests(TransactionTestCase):
    def test_django_s_on_commit_pattern_enqueues_only_after_commit(self):
        app = backend_named("default").app_for("default")
        holder: list[object] = []
        with transaction.atomic():
            transaction.on_commit(functools.partial(
                lambda: holder.append(tasks.send_receipt.enqueue(5, email="c@example.com"))))
            self.assertEqual(holder, [])
        self.assertEqual(app.get_run(holder[0].id).state, "scheduled")  # due now
        run_due()

    def test_enqueue_on_commit_option_defers_to_the_commit_and_drops_on_rollback(self):
        with override_settings(TASKS=_with_options(ENQUEUE_ON_COMMIT=True)):
            app = backend_named("default").app_for("default")
            with transaction.atomic():
                kept = tasks.send_receipt.enqueue(6, email="d@example.com")
                with self.assertRaises(RunNotFound):
                    app.get_run(kept.id)  # nothing in zsched before the commit
            self.assertEqual(app.get_run(kept.id).state, "scheduled")  # due now
            try:
                with transaction.atomic():
                    dropped = tasks.send_receipt.enqueue(7, email="e@example.com")
                    raise RuntimeError("roll back")
            except RuntimeError:
                pass
            with self.assertRaises(RunNotFound):
                app.get_run(dropped.id)
            run_due()
