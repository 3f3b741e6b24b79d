"""A one-file Django project whose ASGI application mounts the console, as docs/console.md
shows: Django serves `/`, the console `/ops` (with actions) and `/ops-ro` (read-only).
test_console_django.py runs it under uvicorn, in its own process (Django's settings are
global to a process)."""

from __future__ import annotations

import os

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="django-console-site-for-tests",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[],
    MIDDLEWARE=[
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
    ],  # fmt: skip
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

import zsched  # noqa: E402
from zsched.web import create_app  # noqa: E402


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"the django site at {request.path}")


urlpatterns = [path("", home), path("orders/", home)]

# The recipe: the project's asgi.py puts the console and Django behind one ASGI router.
django_app = get_asgi_application()
zs = zsched.App(os.environ["ZSCHED_REDIS_URL"], queue=os.environ["CONSOLE_QUEUE"])
application = Starlette(
    routes=[
        Mount("/ops-ro", app=create_app(zs, read_only=True)),
        Mount("/ops", app=create_app(zs)),  # credentials from ZSCHED_WEB_* in the environment
        Mount("/", app=django_app),
    ]
)
