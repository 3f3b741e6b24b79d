"""`zsched dead list|replay|purge`: the dead-letter stream."""

from __future__ import annotations

import argparse
from typing import Any

from zsched.cli.common import UsageError, add_connection, add_json, emit, make_app


def register(sub: Any) -> None:
    p = sub.add_parser("dead", help="list, replay or purge dead letters",
                       description="The dead-letter stream of a queue.")  # fmt: skip
    ds = p.add_subparsers(dest="dead_command", metavar="ACTION", required=True)
    ls = ds.add_parser("list", help="dead letters, oldest first")
    add_connection(ls)
    add_json(ls)
    ls.add_argument("--count", type=int, default=100, help="at most this many (default 100)")
    ls.set_defaults(func=cmd_list)
    for name, fn, what in (("replay", cmd_replay, "put back as fresh runs"),
                           ("purge", cmd_purge, "delete")):  # fmt: skip
        sp = ds.add_parser(name, help=f"{what} dead letters (given ids, or --all)")
        sp.add_argument("entry_ids", nargs="*", metavar="ENTRY_ID")
        sp.add_argument("--all", action="store_true", help=f"{what} every dead letter")
        add_connection(sp)
        add_json(sp)
        sp.set_defaults(func=fn)


def _ids(args: argparse.Namespace) -> list[str] | None:
    if args.all and args.entry_ids:
        raise UsageError("give ENTRY_IDs or --all, not both")
    if not args.all and not args.entry_ids:
        raise UsageError("give one or more ENTRY_IDs, or --all")
    return None if args.all else list(args.entry_ids)


def cmd_list(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    letters = make_app(args).dead_letters(count=args.count)
    lines = [f"{d.entry_id}  {d.run_id or '-'}  {d.task or '?'}  {d.reason}" for d in letters]
    emit(args, [d.as_dict() for d in letters], "\n".join(lines) or "no dead letters")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    counts = make_app(args).replay_dead(_ids(args))
    emit(args, counts, ", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    n = make_app(args).purge_dead(_ids(args))
    emit(args, {"purged": n}, f"purged {n}")
    return 0
