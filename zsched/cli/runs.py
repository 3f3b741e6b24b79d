"""`zsched runs show ID`: one run's state and times."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_connection, add_json, emit, make_app


def register(sub: Any) -> None:
    p = sub.add_parser("runs", help="inspect runs", description="Inspect runs.")
    rs = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    s = rs.add_parser("show", help="state and times of one run")
    s.add_argument("run_id")
    add_connection(s)
    add_json(s)
    s.set_defaults(func=cmd_show)
    c = rs.add_parser("cancel", help="remove a run that is still delayed")
    c.add_argument("run_id")
    add_connection(c)
    add_json(c)
    c.set_defaults(func=cmd_cancel)


def cmd_show(args: argparse.Namespace) -> int:
    st = make_app(args).get_run(args.run_id)
    d = st.as_dict()
    emit(args, d, "\n".join(f"{k:<14} {v}" for k, v in d.items() if v is not None))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    ok = make_app(args).cancel(args.run_id)
    emit(args, {"run_id": args.run_id, "cancelled": ok},
         "cancelled" if ok else "not cancelled: the run is not waiting in the delayed set")  # fmt: skip
    return 0 if ok else 1
