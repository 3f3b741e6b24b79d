// The run envelope (docs/protocol.md, "The run envelope"). This client writes protocol
// version 2, a positional msgpack array without the run id; it reads 2 and 1 (a map, in
// msgpack, or JSON when the first byte is `{`).

import { decode as msgpackDecode, encode as msgpackEncode } from '@msgpack/msgpack';

/** Major protocol version this client writes; it reads READS. */
export const VERSION = 2;
export const READS = [1, 2];
/** Version 2's positions after `v`, in order; the first three are required. */
const V2 = ['task', 'payload', 'run_at_ms', 'enqueued_at_ms', 'scheduled_ms', 'attempt', 'schedule_id', 'max_attempts', 'lease_ms'];
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
 * msgpack bytes of an envelope object, as a version 2 array: positional, without the run id
 * (the key in `runs` and a field of every stream entry), trailing defaults left out
 * (scheduled_ms = run_at_ms, attempt = 1), as the Python client writes it. Elements past the
 * ones this client knows (a later minor's, kept by decode) are written back after them.
 */
export function encode(env) {
  if (env.v === 1) return encodeMap(env);
  const a = [VERSION, env.task, env.payload ?? null, env.run_at_ms, env.enqueued_at_ms ?? 0,
    env.scheduled_ms === env.run_at_ms ? null : env.scheduled_ms ?? null,
    env.attempt === 1 ? null : env.attempt ?? null,
    env.schedule_id ?? null, env.max_attempts ?? null, env.lease_ms ?? null];
  const extra = env._extra ?? [];
  if (extra.length === 0) while (a.length > 5 && a[a.length - 1] === null) a.pop();
  return Buffer.from(msgpackEncode([...a, ...extra]));
}

/** Bytes of a payload alone, msgpack-encoded (the limit applies to it). */
export function encodedSize(payload) {
  return msgpackEncode(payload ?? null).length;
}

/** A version 1 envelope read from a hand-written client is written back as a map, so the
 * fields this client does not know are kept (defaults left out, as above). */
function encodeMap(env) {
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
    throw new PayloadError(`envelope field '${name}' must be an integer >= ${minimum}, got ${pyRepr(value)}`);
  }
  return value;
}

// Type names and values as the Python worker writes them in dead-letter reasons, so that a
// reason reads the same whichever worker wrote it (docs/protocol.md, "Bad envelopes").
function describe(value) {
  if (value === null || value === undefined) return 'NoneType';
  if (Array.isArray(value)) return 'list';
  if (value instanceof Uint8Array) return 'bytes';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  return { string: 'str', boolean: 'bool', object: 'dict', bigint: 'int' }[typeof value] ?? typeof value;
}

function pyRepr(value) {
  if (value === null || value === undefined) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'string') return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

// The last instant a run may name (9999-12-31T23:59:59.999Z), as the scripts and Python.
const MAX_INSTANT_MS = 253_402_300_799_999;

function instant(name, ms) {
  if (ms > MAX_INSTANT_MS) throw new PayloadError(`envelope field '${name}' is after the year 9999 (${ms})`);
  return ms;
}

/** The fields of a version 2 array, named; the checks are then the map's (same messages). */
function v2Fields(a, runId) {
  if (a.length === 0 || a[0] !== 2) {
    if (Number.isSafeInteger(a[0])) throw new PayloadError(`unknown protocol version ${a[0]} in an array envelope (arrays are version 2)`);
    throw new PayloadError('envelope is an array whose first element (protocol version) is not 2');
  }
  if (a.length < 4) throw new PayloadError(`envelope array has ${a.length} elements, needs at least 4 (v, task, payload, run_at_ms)`);
  if (runId === undefined || runId === null) throw new PayloadError('a version 2 envelope does not carry its run id and none was given');
  const d = { v: 2, run_id: runId };
  V2.forEach((name, i) => {
    if (a[i + 1] !== undefined && a[i + 1] !== null) d[name] = a[i + 1];
  });
  if (a.length > V2.length + 1) d._extra = a.slice(V2.length + 1);
  return d;
}

/**
 * Decode envelope bytes the way the Python worker does: same checks, same messages. `runId`
 * is the run's id where the bytes were found (the stream entry's field, the key in `runs`):
 * a version 2 envelope does not repeat it. Unknown extra fields (map) or elements (array) are
 * kept, so a retry re-encodes them; an unknown major version is an error.
 */
export function decode(raw, runId) {
  if (!raw || raw.length === 0) throw new PayloadError('envelope is empty');
  let d;
  try {
    d = raw[0] === 0x7b ? JSON.parse(Buffer.from(raw).toString('utf8')) : msgpackDecode(raw);
  } catch (err) {
    throw new PayloadError(`envelope is neither msgpack nor JSON: ${err.message}`);
  }
  if (Array.isArray(d)) d = v2Fields(d, runId);
  else if (d === null || typeof d !== 'object' || d instanceof Uint8Array) {
    throw new PayloadError(`envelope is a ${describe(d)}, not a map or an array`);
  }
  if (!Number.isSafeInteger(d.v)) {
    throw new PayloadError("envelope field 'v' (protocol version) is missing or not an integer");
  }
  if (!READS.includes(d.v)) {
    throw new PayloadError(`unknown protocol version ${d.v} (this worker reads ${READS.join(' and ')})`);
  }
  if (requireField(d, 'run_id', 'string') === '') throw new PayloadError("envelope field 'run_id' is empty");
  if (requireField(d, 'task', 'string') === '') throw new PayloadError("envelope field 'task' is empty");
  const runAt = requireField(d, 'run_at_ms', 'int');
  if (runAt < 0) throw new PayloadError(`envelope field 'run_at_ms' is negative (${runAt})`);
  instant('run_at_ms', runAt);
  if (d.schedule_id != null && typeof d.schedule_id !== 'string') {
    throw new PayloadError(`envelope field 'schedule_id' has type ${describe(d.schedule_id)}`);
  }
  return {
    ...d,
    payload: d.payload === undefined ? null : d.payload,
    scheduled_ms: instant('scheduled_ms', optionalInt(d, 'scheduled_ms', runAt, 0)),
    enqueued_at_ms: instant('enqueued_at_ms', optionalInt(d, 'enqueued_at_ms', 0, 0)),
    attempt: optionalInt(d, 'attempt', 1, 1),
    max_attempts: optionalInt(d, 'max_attempts', undefined, 1),
    lease_ms: optionalInt(d, 'lease_ms', undefined, 1),
  };
}

/** The envelope of the next attempt: attempt + 1, due at runAtMs; other fields unchanged. */
export function nextAttempt(env, runAtMs) {
  return { ...env, attempt: env.attempt + 1, run_at_ms: runAtMs };
}
