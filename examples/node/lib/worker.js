// A zsched consumer in Node.js (docs/protocol.md, "Consume runs from another language").
// It joins the same consumer group as the Python workers and changes state only through the
// same scripts: ack.lua on success, retry.lua / dead.lua on failure, renew.lua to keep its
// hold on an entry while a handler runs, reclaim.lua to take over runs of consumers that died.

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

import { decode, encode, nextAttempt } from './envelope.js';
import { DEFAULT_DEDUPE_WINDOW_MS, entryEnvelope, fieldMap, MAX_BATCH } from './client.js';
import { GROUP, queueKeys } from './keys.js';
import { runScript } from './scripts.js';

const OK = 1;
// ack, retry, dead (docs/protocol.md, hold codes): 0 the entry is pending with another
// consumer; 2 it is pending with none (written already). This worker never sends an outcome
// twice, so both mean another consumer finished or holds the run: a fence.
const GONE = 2;

// retry.lua refuses a due after 9999-12-31 (and the whole call with it): a retryDelayMs
// function's NaN becomes 0, anything past 1000 years is cut there.
const MAX_RETRY_DELAY_MS = 1000 * 365.25 * 86_400_000;
function retryDelay(ms) {
  const d = Math.floor(Number(ms));
  return Number.isNaN(d) ? 0 : Math.min(Math.max(0, d), MAX_RETRY_DELAY_MS);
}

// The times this worker stamps itself (a retry's next attempt's run_at_ms) follow the Redis
// server's clock, not this machine's (DESIGN.md invariant 3, as zsched/clock.py ServerTime):
// local time plus an offset measured with TIME, half the round trip taken as the one-way delay,
// again at most every OFFSET_REFRESH_MS.
const OFFSET_REFRESH_MS = 60_000;

export class Worker {
  /**
   * @param redis     an ioredis client (not shared with blocking readers of other code)
   * @param queue     the queue name
   * @param handlers  {taskName: async (payload, info) => any}; only these names are run
   */
  constructor(redis, queue, handlers, options = {}) {
    this.redis = redis;
    this.queue = queue;
    this.keys = queueKeys(queue);
    this.handlers = handlers;
    this.consumer = options.consumer ?? `node:${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.visibilityTimeoutMs = options.visibilityTimeoutMs ?? 30_000;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxDeliveries = options.maxDeliveries ?? 5;
    this.dedupeWindowMs = options.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS;
    // Exponential backoff, as the Python worker's default (1 s base), unless a function is given.
    this.retryDelayMs = options.retryDelayMs ?? ((attempt) => Math.min(1000 * 2 ** (attempt - 1), 3_600_000));
    this.reclaimCursor = '0-0';
    this.held = new Set();
    this.leases = new Map(); // entryId -> [scheduleId, runId, leaseMs] of running rule fires
    this.offsetMs = 0; // server clock minus this machine's, in ms (0 until measured)
    this.offsetMeasuredAt = -Infinity; // performance.now() of the last measurement
  }

  /** Measure the server's clock with TIME if the last measurement is older than a minute. */
  async measureServerTime() {
    if (performance.now() - this.offsetMeasuredAt < OFFSET_REFRESH_MS) return;
    const sent = Date.now();
    try {
      const [sec, usec] = await this.redis.time();
      this.offsetMs = Number(sec) * 1000 + Number(usec) / 1000 - (sent + Date.now()) / 2;
    } catch {
      // An ACL without TIME: this machine's clock stays (as the Python worker does).
    }
    this.offsetMeasuredAt = performance.now();
  }

  /** The Redis server's now in epoch ms, as this worker knows it. */
  serverNowMs() {
    return Math.round(Date.now() + this.offsetMs);
  }

  /**
   * Create the consumer group (and the stream) if missing; BUSYGROUP means it exists. If this
   * worker's first setup creates it, on a queue no zsched 0.3 dispatcher moved runs of (no
   * `entries` key, or one 0.4 wrote), it is the queue's first reader, so dispatchers may write
   * tagged entries (HSETNX control entries). Not on a later setup: the group vanished, Redis
   * lost its data (docs/operations.md, "Upgrading from zsched 0.3"). Then register as a reader
   * of both entry shapes (entryEnvelope), so operators can tell it from a 0.3 worker.
   */
  async setup() {
    let created = true;
    try {
      await this.redis.xgroup('CREATE', this.keys.ready, GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!String(err.message).startsWith('BUSYGROUP')) throw err;
      created = false;
    }
    if (created && !this.started) {
      const kind = await this.redis.type(this.keys.entries);
      const fresh = kind === 'none' || (kind === 'string' && (await this.redis.get(this.keys.entries)).startsWith('zsched 0.4+'));
      if (fresh) await this.redis.hsetnx(this.keys.control, 'entries', 'tagged');
    }
    this.started = true;
    if (!this.registered) await this.redis.hset(this.keys.readers, this.consumer, 'plain,tagged');
    this.registered = true;
  }

  /** Read up to `count` runs (waiting up to blockMs when given), run them, write outcomes. */
  async tick({ count = 100, blockMs = null } = {}) {
    await this.setup();
    await this.measureServerTime();
    const { claimed, over } = await this.reclaim(count);
    const deliveries = [...claimed];
    if (deliveries.length < count) deliveries.push(...(await this.read(count - deliveries.length, blockMs)));
    const outcomes = [...over, ...(await Promise.all(deliveries.map((d) => this.execute(d))))];
    await this.flush(outcomes);
    return outcomes;
  }

  /** Run ticks until `signal` aborts. */
  async run(signal, { count = 100, blockMs = 1000, onOutcome = () => {} } = {}) {
    const timer = setInterval(() => this.renewHolds().catch(() => {}), Math.max(10, this.visibilityTimeoutMs / 3));
    try {
      while (!signal.aborted) {
        for (const o of await this.tick({ count, blockMs })) onOutcome(o);
      }
    } finally {
      clearInterval(timer);
    }
  }

  async read(count, blockMs) {
    const args = ['GROUP', GROUP, this.consumer, 'COUNT', count];
    if (blockMs != null) args.push('BLOCK', blockMs);
    const reply = await this.redis.xreadgroupBuffer(...args, 'STREAMS', this.keys.ready, '>');
    const out = [];
    for (const [, entries] of reply ?? []) {
      for (const [id, fields] of entries) {
        const f = fieldMap(fields ?? []);
        out.push({ entryId: id.toString(), runId: f.run_id?.toString() ?? '', raw: entryEnvelope(f) ?? Buffer.alloc(0), deliveries: 1 });
      }
    }
    return out;
  }

  /**
   * Take over entries idle past the visibility timeout (their consumer stopped renewing).
   * Returns {claimed, over}: claimed to run; over, a rule's fires delivered too often, as dead
   * outcomes (reclaim.lua's hand_over form), so that dead.lua ends their rule's lease.
   */
  async reclaim(count) {
    const k = this.keys;
    const [cursor, flat, , , overFlat] = await runScript(
      this.redis,
      'reclaim',
      [k.ready, k.runs, k.entries, k.dead, k.stats],
      ['', GROUP, this.consumer, this.visibilityTimeoutMs, Math.min(count, MAX_BATCH), this.maxDeliveries, this.reclaimCursor, 1],
      { binary: true },
    );
    this.reclaimCursor = cursor.toString();
    const entries = (f) => {
      const out = [];
      for (let i = 0; i < f.length; i += 4) {
        out.push({ entryId: f[i].toString(), runId: f[i + 1].toString(), raw: f[i + 2], deliveries: Number(f[i + 3]) });
      }
      return out;
    };
    const over = entries(overFlat ?? []).map((d) => ({
      ...d,
      outcome: 'dead',
      reason: `delivered ${d.deliveries} times without an ack (max_deliveries ${this.maxDeliveries})`,
      // A rule's fire: its run id is `<schedule_id>@...` (a guess is harmless: dead.lua frees
      // a lease only for the run it names).
      lease: [d.runId.slice(0, d.runId.lastIndexOf('@')), d.runId, 0],
    }));
    return { claimed: entries(flat), over };
  }

  /** Renew the hold on the given (default: every held) entry; returns {entryId: true|false}. */
  async renewHolds(entryIds = [...this.held]) {
    // A rule's overlap lease (this.leases) is not renewed: it has no TTL, it lasts while its run lives.
    const result = {};
    for (let i = 0; i < entryIds.length; i += MAX_BATCH) {
      const chunk = entryIds.slice(i, i + MAX_BATCH);
      const codes = await runScript(this.redis, 'renew', [this.keys.ready, this.keys.stats], [GROUP, this.consumer, ...chunk]);
      chunk.forEach((id, j) => {
        result[id] = codes[j] === OK;
      });
    }
    return result;
  }

  /** Run one delivery; returns its outcome (not yet written). */
  async execute(d) {
    let env;
    try {
      env = decode(d.raw, d.runId);
    } catch (err) {
      // No lease known: a rule fire's run id (`<schedule_id>@...`) names its rule, for dead.lua.
      const at = d.runId.lastIndexOf('@');
      const lease = at > 0 ? [d.runId.slice(0, at), d.runId, 0] : null;
      return { ...d, outcome: 'dead', reason: `undecodable envelope: ${err.message}`, lease };
    }
    // A rule's fire that holds the rule's overlap lease (no TTL: it lasts while the run lives):
    // freed by ack.lua once it is done, by dead.lua once it is dead (flush), in that call.
    const lease = env.lease_ms && env.schedule_id ? [env.schedule_id, env.run_id, env.lease_ms] : null;
    const base = { ...d, task: env.task, attempt: env.attempt, payload: env.payload, lease };
    const handler = Object.hasOwn(this.handlers, env.task) ? this.handlers[env.task] : null;
    if (!handler) return { ...base, outcome: 'dead', reason: `unknown task '${env.task}': not registered with this worker` };
    const info = {
      runId: env.run_id,
      task: env.task,
      attempt: env.attempt,
      scheduledMs: env.scheduled_ms,
      queue: this.queue,
      scheduleId: env.schedule_id ?? null,
      deliveries: d.deliveries,
      renew: async () => (await this.renewHolds([d.entryId]))[d.entryId],
    };
    this.held.add(d.entryId);
    if (lease) this.leases.set(d.entryId, lease);
    try {
      await handler(env.payload, info);
      return { ...base, outcome: 'ack' };
    } catch (err) {
      const attempts = env.max_attempts ?? this.maxAttempts;
      const why = `${err?.name ?? 'Error'}: ${err?.message ?? String(err)}`;
      if (env.attempt >= attempts) {
        return { ...base, outcome: 'dead', reason: `failed after ${env.attempt} attempt(s): ${why}`.slice(0, 2000) };
      }
      const delayMs = retryDelay(this.retryDelayMs(env.attempt));
      return { ...base, outcome: 'retry', delayMs, reason: why, next: encode(nextAttempt(env, this.serverNowMs() + delayMs)) };
    } finally {
      this.held.delete(d.entryId);
      this.leases.delete(d.entryId);
    }
  }

  /** Write outcomes: one ack, one retry and one dead call per 1000 runs. Marks fenced ones. */
  async flush(outcomes) {
    const k = this.keys;
    const kinds = {
      ack: {
        script: 'ack',
        keys: [k.ready, k.runs, k.entries, k.done, k.stats],
        fixed: ['', GROUP, this.consumer, this.dedupeWindowMs, 200],
        group: (o) => [o.entryId, o.runId],
      },
      retry: {
        script: 'retry',
        keys: [k.ready, k.runs, k.entries, k.delayed, k.stats, k.wake],
        fixed: ['', GROUP, this.consumer],
        group: (o) => [o.entryId, o.runId, o.delayMs, o.next],
      },
      dead: {
        script: 'dead',
        keys: [k.ready, k.runs, k.entries, k.dead, k.stats, k.rule_waiting, k.delayed, k.wake, k.done],
        fixed: ['', GROUP, this.consumer],
        // The raw envelope as read, so the dead letter can be replayed unchanged.
        group: (o) => [o.entryId, o.runId, o.reason, o.raw],
      },
    };
    for (const [kind, spec] of Object.entries(kinds)) {
      const mine = outcomes.filter((o) => o.outcome === kind);
      for (let i = 0; i < mine.length; i += MAX_BATCH) {
        const chunk = mine.slice(i, i + MAX_BATCH);
        let keys = spec.keys;
        let args = [...spec.fixed, ...chunk.flatMap(spec.group)];
        // ack.lua and dead.lua end the leases of the rule runs they finish, in the same
        // call: a worker that dies right after it leaves no lease held by a run that ended.
        const withLease = kind === 'retry' ? [] : chunk.filter((o) => o.lease);
        if (withLease.length > 0) {
          const pairs = withLease.flatMap((o) => [o.lease[0], o.lease[1]]);
          if (kind === 'ack') keys = [...keys, k.rule_waiting, k.delayed, k.wake];
          keys = [...keys, ...withLease.map((o) => k.lease(o.lease[0]))];
          // dead.lua's lease tail starts with the dedupe window (a waiting fire done within it is dropped).
          args = kind === 'dead' ? [...args, this.dedupeWindowMs, ...pairs] : [...args, ...pairs];
        }
        const codes = await runScript(this.redis, spec.script, keys, args);
        chunk.forEach((o, j) => {
          o.written = codes[j] === OK;
          if (!o.written) o.fenced = true; // another consumer owns (0) or finished (2) it
          if (codes[j] === GONE) o.gone = true;
        });
        if (kind === 'retry') await this.extend(chunk.filter((o) => o.written && o.lease));
      }
    }
  }

  /** Runs of rules that wait for a retry: keep each rule's lease for the wait (extend.lua). */
  async extend(waiting) {
    const k = this.keys;
    for (const { delayMs, lease: [scheduleId, runId, leaseMs] } of waiting) {
      await runScript(this.redis, 'extend', [k.lease(scheduleId), k.runs], [runId, Math.max(1, delayMs + leaseMs)]);
    }
  }
}
