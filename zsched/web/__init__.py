"""The operator console: a web UI over the public API of zsched.App (docs/console.md).

Owns the ASGI app (`create_app`, mountable under any prefix), its pages and actions, the
login/CSRF rules and the bounded reads a page makes. Needs the `zsched[web]` extra
(Starlette, Jinja2, uvicorn); nothing here is imported by the rest of zsched.
"""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    """The console as an ASGI app; see zsched.web.app.create_app."""
    from zsched.web.app import create_app as _create

    return _create(*args, **kwargs)


__all__ = ["create_app"]
