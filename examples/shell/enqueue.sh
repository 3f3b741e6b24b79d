#!/usr/bin/env bash
# Enqueue one delayed zsched run with nothing but bash and redis-cli (docs/protocol.md).
#
#   examples/shell/enqueue.sh --queue emails --task send --payload '{"to":"a@b.c"}' \
#       [--run-id ID] [--run-at-ms EPOCH_MS | --delay-ms MS] [--max-attempts N] \
#       [--redis redis://127.0.0.1:6379/0] [--dedupe-window-ms MS]
#
# The envelope is JSON (the worker reads an envelope whose first byte is `{` as JSON), so no
# msgpack tool is needed. --payload must be JSON text; it is checked with jq when jq is there,
# otherwise a malformed payload makes the run a dead letter ("envelope is neither msgpack nor
# JSON") when a worker reads it. Prints {"run_id": ..., "code": 1|0|2, "duplicate": bool};
# exits 1 with the script's error reply on stderr when Redis refuses the run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lua="${ZSCHED_LUA_DIR:-$here/../../lua}/enqueue.lua"
url="${ZSCHED_REDIS_URL:-redis://127.0.0.1:6379/0}"
queue="" task="" payload="null" run_id="" run_at="" delay="" max_attempts=""
dedupe_window_ms=3600000              # the queue's dedupe window; every client must agree
max_envelope_bytes=$((512 * 1024 + 4096))  # payload limit + room for the envelope's fields

die() { echo "enqueue.sh: $*" >&2; exit 2; }

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in -h|--help) usage; exit 0 ;; esac
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case "$1" in
    --redis) url="$2" ;;
    --queue) queue="$2" ;;
    --task) task="$2" ;;
    --payload) payload="$2" ;;
    --run-id) run_id="$2" ;;
    --run-at-ms) run_at="$2" ;;
    --delay-ms) delay="$2" ;;
    --max-attempts) max_attempts="$2" ;;
    --dedupe-window-ms) dedupe_window_ms="$2" ;;
    *) die "unknown option $1" ;;
  esac
  shift 2
done
[[ -n "$queue" && -n "$task" ]] || die "--queue and --task are required"
[[ "$queue" != *[{}]* ]] || die "queue name must not contain braces"
[[ -z "$run_at" || -z "$delay" ]] || die "give --run-at-ms or --delay-ms, not both"
[[ -r "$lua" ]] || die "cannot read $lua (set ZSCHED_LUA_DIR)"
# JSON numbers have no leading zeros: "007" would make an envelope no worker can decode.
for n in "$run_at" "$delay" "$max_attempts"; do
  [[ -z "$n" || "$n" =~ ^(0|[1-9][0-9]*)$ ]] || die "times, delays and attempts are whole numbers without leading zeros, got '$n'"
done
[[ -z "$max_attempts" || "$max_attempts" -ge 1 ]] || die "--max-attempts must be at least 1"
for s in "$run_id" "$task"; do
  # Checked here, not inside json_string: a failing $(...) in the middle of a word is ignored.
  [[ ! "$s" =~ [[:cntrl:]] ]] || die "control characters are not allowed in run ids and task names"
done
if command -v jq >/dev/null 2>&1; then
  jq . >/dev/null 2>&1 <<<"$payload" || die "--payload is not JSON: $payload"
fi

# A JSON string literal. Control characters were refused above rather than escaped: run ids
# and task names are identifiers, and keeping this small keeps it obviously right.
json_string() {
  local s="$1"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  printf '"%s"' "$s"
}

now_ms="$(date +%s%3N)"
if [[ -z "$run_id" ]]; then
  # As the other clients: 8 characters of the epoch ms in base 64 with URL-safe characters in
  # ASCII order (so ids sort by time), then 12 random URL-safe characters (72 bits).
  ordered="-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
  run_id=""
  for shift in 42 36 30 24 18 12 6 0; do
    run_id+="${ordered:$(( (now_ms >> shift) & 63 )):1}"
  done
  run_id+="$(head -c 9 /dev/urandom | base64 | tr '+/' '-_')"
fi
if [[ -n "$run_at" ]]; then
  at_arg="$run_at" due="$run_at"
else
  # "+N": the script adds N ms to the Redis server's TIME, so this machine's clock skew does
  # not move the run; the envelope's run_at_ms is this machine's estimate (informational).
  at_arg="+${delay:-0}" due=$((now_ms + ${delay:-0}))
fi
# Fields at their default (scheduled_ms = run_at_ms, attempt = 1) are left out, as the other
# clients do (docs/protocol.md, "Encoding rules").
envelope="{\"v\":1,\"run_id\":$(json_string "$run_id"),\"task\":$(json_string "$task"),\"payload\":$payload,\"run_at_ms\":$due,\"enqueued_at_ms\":$now_ms"
[[ -z "$max_attempts" ]] || envelope+=",\"max_attempts\":$max_attempts"
envelope+="}"

# Key names: docs/protocol.md, "Keys of a queue".
prefix="zsched"
tag="{$queue}"
keys=("$prefix:$tag:delayed" "$prefix:$tag:runs" "$prefix:$tag:done" "$prefix:$tag:stats" "$prefix:$tag:wake")
args=("" "$dedupe_window_ms" "$max_envelope_bytes" "$run_id" "$at_arg" "$task" "$envelope")

sha="$(sha1sum "$lua" | cut -c1-40)"
call() { redis-cli --no-auth-warning -u "$url" -e EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "${args[@]}" 2>&1; }
if ! reply="$(call)"; then
  if [[ "$reply" == NOSCRIPT* ]]; then
    # Not in the server's script cache (new server, SCRIPT FLUSH, failover): load the file's
    # exact bytes (-x sends stdin as the last argument), which yields the same SHA, and retry.
    loaded="$(redis-cli --no-auth-warning -u "$url" -e -x SCRIPT LOAD <"$lua")"
    [[ "$loaded" == "$sha" ]] || { echo "enqueue failed: SCRIPT LOAD returned $loaded" >&2; exit 1; }
    reply="$(call)" || { echo "enqueue failed: $reply" >&2; exit 1; }
  else
    echo "enqueue failed: $reply" >&2
    exit 1
  fi
fi
case "$reply" in
  1) dup=false ;;
  0 | 2) dup=true ;;
  *) echo "enqueue failed: unexpected reply $reply" >&2; exit 1 ;;
esac
printf '{"run_id":%s,"code":%s,"duplicate":%s}\n' "$(json_string "$run_id")" "$reply" "$dup"
