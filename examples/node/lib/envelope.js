// The run envelope, protocol version 1 (docs/protocol.md, "The run envelope").
// msgpack on the wire; JSON is accepted on read when the first byte is `{`.

import { decode as msgpackDecode, encode as msgpackEncode } from '@msgpack/msgpack';

/** Major protocol version this client writes and reads. */
export const VERSION = 1;
export const MAX_RUN_ID_BYTES = 512;
export const MAX_TASK_BYTES = 256;

export class PayloadError extends Error {}

/** A new envelope (a plain object) for the first attempt of a run. */
export function build({ runId, task, payload = null, runAtMs, enqueuedAtMs, maxAttempts, scheduleId }) {
  const env = {
    v: VERSION,
    run_id: runId,
    task,
    payload,
    run_at_ms: runAtMs,
    scheduled_ms: runAtMs,
    enqueued_at_ms: enqueuedAtMs,
    attempt: 1,
  };
  if (scheduleId != null) env.schedule_id = scheduleId;
  if (maxAttempts != null) env.max_attempts = maxAttempts;
  return env;
}

/**
 * msgpack bytes of an envelope object. Whole JS numbers are written as msgpack integers.
 * Fields at their default (scheduled_ms = run_at_ms, attempt = 1) are left out, as the Python
 * client does: every delayed run is stored in Redis, and the bytes count.
 */
export function encode(env) {
  const out = { ...env };
  if (out.scheduled_ms === out.run_at_ms) delete out.scheduled_ms;
  if (out.attempt === 1) delete out.attempt;
  return Buffer.from(msgpackEncode(out, { ignoreUndefined: true }));
}

function requireField(d, name, kind) {
  if (!(name in d)) throw new PayloadError(`envelope field '${name}' is missing`);
  const value = d[name];
  const ok = kind === 'int' ? Number.isSafeInteger(value) : typeof value === kind;
  if (!ok) throw new PayloadError(`envelope field '${name}' has type ${describe(value)}`);
  return value;
}

function optionalInt(d, name, fallback, minimum) {
  const value = d[name];
  if (value === undefined || value === null) return fallback;
  if (!Number.isSafeInteger(value) || value < minimum) {
    throw new PayloadError(`envelope field '${name}' must be an integer >= ${minimum}, got ${JSON.stringify(value)}`);
  }
  return value;
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (value instanceof Uint8Array) return 'bytes';
  if (typeof value === 'number' && !Number.isInteger(value)) return 'float';
  return typeof value;
}

/**
 * Decode envelope bytes the way the Python worker does: same checks, same messages. Unknown
 * extra fields are kept (so a retry re-encodes them); an unknown major version is an error.
 */
export function decode(raw) {
  if (!raw || raw.length === 0) throw new PayloadError('envelope is empty');
  let d;
  try {
    d = raw[0] === 0x7b ? JSON.parse(Buffer.from(raw).toString('utf8')) : msgpackDecode(raw);
  } catch (err) {
    throw new PayloadError(`envelope is neither msgpack nor JSON: ${err.message}`);
  }
  if (d === null || typeof d !== 'object' || Array.isArray(d) || d instanceof Uint8Array) {
    throw new PayloadError(`envelope is a ${describe(d)}, not a map`);
  }
  if (!Number.isSafeInteger(d.v)) {
    throw new PayloadError("envelope field 'v' (protocol version) is missing or not an integer");
  }
  if (d.v !== VERSION) {
    throw new PayloadError(`unknown protocol version ${d.v} (this worker reads ${VERSION})`);
  }
  if (requireField(d, 'run_id', 'string') === '') throw new PayloadError("envelope field 'run_id' is empty");
  if (requireField(d, 'task', 'string') === '') throw new PayloadError("envelope field 'task' is empty");
  const runAt = requireField(d, 'run_at_ms', 'int');
  if (runAt < 0) throw new PayloadError(`envelope field 'run_at_ms' is negative (${runAt})`);
  if (d.schedule_id != null && typeof d.schedule_id !== 'string') {
    throw new PayloadError(`envelope field 'schedule_id' has type ${describe(d.schedule_id)}`);
  }
  return {
    ...d,
    payload: d.payload === undefined ? null : d.payload,
    scheduled_ms: optionalInt(d, 'scheduled_ms', runAt, 0),
    enqueued_at_ms: optionalInt(d, 'enqueued_at_ms', 0, 0),
    attempt: optionalInt(d, 'attempt', 1, 1),
    max_attempts: optionalInt(d, 'max_attempts', undefined, 1),
  };
}

/** The envelope of the next attempt: attempt + 1, due at runAtMs; other fields unchanged. */
export function nextAttempt(env, runAtMs) {
  return { ...env, attempt: env.attempt + 1, run_at_ms: runAtMs };
}
