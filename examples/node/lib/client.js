// Enqueue, cancel and inspect zsched runs from Node.js (docs/protocol.md, "Enqueue a delayed
// run", "Cancel a run", "Read a run's state").

import { randomBytes } from 'node:crypto';

import { MAX_RUN_ID_BYTES, MAX_TASK_BYTES, build, decode, encode, encodedSize, PayloadError } from './envelope.js';
import { GROUP, queueKeys } from './keys.js';
import { runScript } from './scripts.js';

/** Defaults shared with the Python client (zsched.config.QueueSettings). */
export const DEFAULT_DEDUPE_WINDOW_MS = 3_600_000;
export const DEFAULT_MAX_PAYLOAD_BYTES = 512 * 1024;
/** Room for the envelope's own fields on top of the payload limit, as the Python client allows. */
export const ENVELOPE_OVERHEAD_BYTES = 4096;
export const MAX_BATCH = 1000;

/** Reply codes of enqueue.lua. */
export const ENQUEUED = 1;
export const DUPLICATE_LIVE = 0;
export const DUPLICATE_DONE = 2;
/**
 * [dueMs, envelope] of a value of `runs`: key layout 3 puts a 7-byte due tag before the
 * envelope (0x00, then the due time in ms, 6 bytes big-endian); dueMs is null without one.
 */
export function untag(value) {
  if (value.length >= 7 && value[0] === 0) return [value.readUIntBE(1, 6), value.subarray(7)];
  return [null, value];
}

/** The value of `runs` for an envelope due at dueMs: untag's inverse. */
export function tag(dueMs, envelope) {
  const head = Buffer.alloc(7);
  head.writeUIntBE(dueMs, 1, 6);
  return Buffer.concat([head, envelope]);
}

/** Reply codes of cancel.lua. */
export const CANCELLED = 1;
export const NOT_FOUND = 0;
export const NOT_CANCELLABLE = 2;

/** Reply codes of reschedule.lua, by name (zsched.RescheduleOutcome). */
export const RESCHEDULE_OUTCOMES = { 0: 'not_found', 1: 'moved', 2: 'ready', 3: 'running', 4: 'done', 5: 'dead' };
/** Reply codes of revoke.lua, by name (zsched.CancelOutcome). */
export const REVOKE_OUTCOMES = { 0: 'not_found', 1: 'cancelled_delayed', 2: 'cancelled_ready', 3: 'requested', 4: 'done', 5: 'already_cancelled' };

/** Dead letters reschedule.lua reads to tell a dead run from an unknown one (as Python does). */
export const RESCHEDULE_DEAD_SCAN = 1000;

// Run ids as the Python client makes them (docs/protocol.md, "enqueue.lua"): 8 characters of
// the epoch ms, then 12 of a 72-bit number that starts at random each millisecond and counts
// up within it, both in base 64 with URL-safe characters in ASCII order, so ids sort by time.
const ORDERED = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
let lastMs = -1;
let counter = 0n;

function ordered(buf) {
  let out = '';
  for (const c of buf.toString('base64url')) out += ORDERED[BASE64URL.indexOf(c)];
  return out;
}

export function newRunId() {
  const ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = BigInt(`0x${randomBytes(9).toString('hex')}`) >> 1n; // 2^71 ids of room
  } else {
    counter += 1n; // same millisecond (or a clock that stepped back): count up
  }
  const time = Buffer.alloc(6);
  time.writeUIntBE(lastMs, 0, 6);
  return ordered(time) + ordered(Buffer.from(counter.toString(16).padStart(18, '0'), 'hex'));
}

/**
 * One enqueue group (run_id, run_at ARGV, task, envelope bytes) after the same checks the
 * Python client makes. Give `runAtMs` (epoch ms) or `delayMs` (relative to Redis TIME).
 */
export function buildRun({ task, payload = null, runAtMs, delayMs, runId, maxAttempts }, nowMs = Date.now(),
  maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES) {
  if (typeof task !== 'string' || task === '') throw new PayloadError(`task name must be a non-empty string, got ${JSON.stringify(task)}`);
  if (Buffer.byteLength(task) > MAX_TASK_BYTES) throw new PayloadError(`task name is over ${MAX_TASK_BYTES} bytes`);
  if (runAtMs != null && delayMs != null) throw new PayloadError('give runAtMs or delayMs, not both');
  const id = runId ?? newRunId();
  if (typeof id !== 'string' || id === '') throw new PayloadError('run id must be a non-empty string');
  if (Buffer.byteLength(id) > MAX_RUN_ID_BYTES) throw new PayloadError(`run id is over ${MAX_RUN_ID_BYTES} bytes`);
  let at;
  let due;
  if (runAtMs != null) {
    if (!Number.isSafeInteger(runAtMs) || runAtMs < 0) throw new PayloadError(`runAtMs must be whole epoch ms >= 0, got ${runAtMs}`);
    at = String(runAtMs);
    due = runAtMs;
  } else {
    const d = delayMs ?? 0;
    if (!Number.isSafeInteger(d) || d < 0) throw new PayloadError(`delayMs must be whole ms >= 0, got ${d}`);
    // "+N": the script adds N to the server's TIME, so client clock skew does not move the run.
    at = `+${d}`;
    due = nowMs + d;
  }
  const env = encode(build({ runId: id, task, payload, runAtMs: due, enqueuedAtMs: nowMs, maxAttempts }));
  // The payload is packed once, inside the envelope; only a large envelope needs it measured alone.
  if (env.length > maxPayloadBytes && encodedSize(payload) > maxPayloadBytes) {
    throw new PayloadError(`payload is ${encodedSize(payload)} bytes encoded, over the limit of ${maxPayloadBytes}`);
  }
  return [id, at, task, env];
}

/**
 * A group as enqueue.lua takes it: a run due at epoch ms goes as the value `runs` stores, its
 * due tag (0x00, the due in 6 bytes big-endian) before the envelope, so the script builds no
 * value (docs/protocol.md, "enqueue.lua"); a relative due ("+N") as it is.
 */
function tagged([id, at, task, env]) {
  return at.startsWith('+') ? [id, at, task, env] : [id, at, task, tag(Number(at), env)];
}

export class Client {
  /**
   * @param redis an ioredis client
   * @param queue the queue name
   */
  constructor(redis, queue, { dedupeWindowMs = DEFAULT_DEDUPE_WINDOW_MS, maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES } = {}) {
    this.redis = redis;
    this.queue = queue;
    this.keys = queueKeys(queue);
    this.dedupeWindowMs = dedupeWindowMs;
    this.maxEnvelopeBytes = maxPayloadBytes + ENVELOPE_OVERHEAD_BYTES;
  }

  /** Enqueue one run. Returns {runId, code, duplicate}. */
  async enqueue(task, payload = null, options = {}) {
    const [result] = await this.enqueueMany([{ task, payload, ...options }]);
    return result;
  }

  /** Enqueue many runs, 1000 per script call. Returns [{runId, code, duplicate}]. */
  async enqueueMany(items) {
    const groups = items.map((item) => buildRun(item, Date.now(), this.maxEnvelopeBytes - ENVELOPE_OVERHEAD_BYTES));
    const k = this.keys;
    const out = [];
    for (let i = 0; i < groups.length; i += MAX_BATCH) {
      const chunk = groups.slice(i, i + MAX_BATCH);
      const codes = await runScript(
        this.redis,
        'enqueue',
        [k.delayed, k.runs, k.done, k.stats, k.wake],
        ['', this.dedupeWindowMs, this.maxEnvelopeBytes, ...chunk.flatMap(tagged)],
      );
      chunk.forEach((g, j) => out.push({ runId: g[0], code: codes[j], duplicate: codes[j] !== ENQUEUED }));
    }
    return out;
  }

  /** Cancel a run still waiting in the delayed set. Returns CANCELLED, NOT_FOUND or NOT_CANCELLABLE. */
  async cancel(runId) {
    return runScript(this.redis, 'cancel', [this.keys.delayed, this.keys.runs], [runId]);
  }

  /**
   * Cancel a run wherever it is (revoke.lua): a delayed or unread ready run is removed; a
   * running one is asked to stop (its worker ends it `cancelled`). Returns {runId, code,
   * outcome}. A removed rule fire holding its rule's overlap lease frees it in the same call
   * (revoke.lua's lease keys, for a run id `<schedule_id>@...`), as the Python client does.
   */
  async cancelRun(runId, { dedupeWindowMs = this.dedupeWindowMs } = {}) {
    const k = this.keys;
    let keys = [k.delayed, k.runs, k.entries, k.ready, k.done, k.cancelled, k.stats, k.cancelRequest(runId)];
    const args = ['', runId, GROUP, dedupeWindowMs];
    const at = runId.lastIndexOf('@');
    if (at > 0) {
      const scheduleId = runId.slice(0, at); // a rule's fire routes by the part before its last @
      keys = [...keys, k.lease(scheduleId), k.rule_waiting, k.wake];
      args.push(scheduleId);
    }
    const [code] = await runScript(this.redis, 'revoke', keys, args, { binary: true });
    const n = Number(code);
    return { runId, code: n, outcome: REVOKE_OUTCOMES[n] };
  }

  /**
   * Move a run still waiting in the delayed set to a new due time: `runAtMs` (epoch ms) or
   * `delayMs` (after the Redis server's TIME). Returns {runId, code, outcome, moved, dueMs}.
   */
  async reschedule(runId, { runAtMs, delayMs } = {}) {
    if ((runAtMs == null) === (delayMs == null)) throw new PayloadError('give exactly one of runAtMs or delayMs');
    const value = runAtMs ?? delayMs;
    if (!Number.isSafeInteger(value) || value < 0) throw new PayloadError(`${runAtMs != null ? 'runAtMs' : 'delayMs'} must be whole ms >= 0, got ${value}`);
    const k = this.keys;
    const [code, due] = await runScript(
      this.redis,
      'reschedule',
      [k.delayed, k.runs, k.entries, k.ready, k.done, k.dead, k.wake],
      ['', runId, runAtMs != null ? String(runAtMs) : `+${delayMs}`, RESCHEDULE_DEAD_SCAN, GROUP],
    );
    return { runId, code, outcome: RESCHEDULE_OUTCOMES[code], moved: code === 1, dueMs: code === 1 ? due : null };
  }

  /**
   * Where a run is: {state: scheduled|ready|running|done|dead|unknown, ...}. Reads the keys
   * the way zsched.runs.status.get_run does (docs/protocol.md, "Read a run's state").
   */
  async getRun(runId, { deadScanLimit = 10_000, tries = 3 } = {}) {
    const k = this.keys;
    // `entries` is zsched 0.2's hash until a 0.3 dispatcher moves runs (then a string, which
    // HGET refuses: no 0.2 entry is left there).
    const [[, value], [, legacyEntry], [oldErr, oldEntry], [, doneAt]] = await this.redis
      .pipeline()
      .hgetBuffer(k.runs, runId)
      .hget(k.legacyEntries, runId)
      .hget(k.entries, runId)
      .zscore(k.done, runId)
      .exec();
    const legacy = legacyEntry ?? (oldErr ? null : oldEntry);
    // On the stream, a run's value in `runs` is its entry id (its envelope is in the entry);
    // a run dispatched by zsched 0.2 kept its tagged value, its entry id in `entries`, now
    // `entries:legacy`.
    const text = value ? value.toString('latin1') : null;
    const onStream = text !== null && /^\d+-\d+$/.test(text);
    const entry = onStream ? text : value ? legacy : null;
    if (value && !entry) {
      // Live and not on the stream: in the delayed set, due when the value's tag says.
      const [dueMs, raw] = untag(value);
      const envelope = safeDecode(raw, runId);
      return { runId, state: 'scheduled', runAtMs: dueMs ?? envelope?.run_at_ms, envelope };
    }
    if (value && entry) {
      // Its pending row and its entry in one round trip (as zsched.runs.status does).
      const [[pendErr, pendRows], [rowsErr, rows]] = await this.redis
        .pipeline()
        .xpending(k.ready, GROUP, entry, entry, 1)
        .xrangeBuffer(k.ready, entry, entry)
        .exec();
      // NOGROUP: no worker has created the group yet, so nobody has read the entry.
      if (pendErr && !String(pendErr.message).startsWith('NOGROUP')) throw pendErr;
      if (rowsErr) throw rowsErr;
      const pending = pendErr ? [] : pendRows;
      let raw = untag(value)[1];
      if (onStream) raw = rows.length ? entryEnvelope(fieldMap(rows[0][1])) : null;
      const envelope = raw ? safeDecode(raw, runId) : null;
      // The entry left the stream between the reads (the run finished or moved): read again.
      if (onStream && !rows.length && !pending.length && tries > 1) {
        return this.getRun(runId, { deadScanLimit, tries: tries - 1 });
      }
      if (pending.length) {
        const [, consumer, idleMs, deliveries] = pending[0];
        return { runId, state: 'running', consumer, idleMs, deliveries, envelope };
      }
      return { runId, state: 'ready', envelope };
    }
    if (doneAt !== null) return { runId, state: 'done', doneAtMs: Number(doneAt) };
    let end = '+';
    for (let seen = 0; seen < deadScanLimit; ) {
      const batch = await this.redis.xrevrangeBuffer(k.dead, end, '-', 'COUNT', 500);
      for (const [id, fields] of batch) {
        const f = fieldMap(fields);
        if (f.run_id && f.run_id.toString() === runId) {
          // untag: a worker of zsched 0.3 dead-letters a tagged entry whole.
          return { runId, state: 'dead', reason: f.reason?.toString(), envelope: safeDecode(entryEnvelope(f), runId) };
        }
      }
      if (batch.length < 500) break;
      seen += batch.length;
      end = `(${batch[batch.length - 1][0].toString()}`;
    }
    return { runId, state: 'unknown' };
  }
}

function safeDecode(raw, runId) {
  try {
    return decode(raw, runId);
  } catch {
    return null;
  }
}

/**
 * The envelope of a ready-stream entry's fields (fieldMap), in either shape: run_id, envelope,
 * due_ms (as dispatch.lua writes it), or run_id, envelope holding the run's value of `runs` as
 * it was: due tag (first byte 0, which no envelope starts with), then envelope
 * (docs/protocol.md, "Keys"). null without an envelope.
 */
export function entryEnvelope(f) {
  return f.envelope ? untag(f.envelope)[1] : null;
}

/** [k1, v1, k2, v2 ...] (Buffers) -> {k1: v1, ...} with string keys and Buffer values. */
export function fieldMap(flat) {
  const out = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i].toString()] = flat[i + 1];
  return out;
}
