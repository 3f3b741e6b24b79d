#!/usr/bin/env node
// A Node.js zsched worker on the same queue as the Python workers.
//   node worker.js --redis URL --queue Q [--once] [--consumer NAME] [--max-attempts N]
//        [--retry-delay-ms MS] [--visibility-timeout-ms MS]
// Prints one JSON line per finished run: {"event": "outcome", "run_id", "task", "attempt",
// "outcome": "ack"|"retry"|"dead", "written": bool, "gone": bool, "reason"?} (gone: refused,
// the entry was no longer pending: another consumer finished the run). --once does one pass over what
// is ready now and exits; without it the worker runs until SIGTERM or SIGINT.
import Redis from 'ioredis';

import { intOrUndefined, parseArgs } from './lib/cli.js';
import { Worker } from './lib/worker.js';
import { handlers } from './handlers.js';

function report(o) {
  console.log(JSON.stringify({
    event: 'outcome', entry_id: o.entryId, run_id: o.runId, task: o.task ?? null, attempt: o.attempt ?? null,
    payload: o.payload ?? null, outcome: o.outcome, written: Boolean(o.written), gone: Boolean(o.gone),
    reason: o.reason ?? null,
  }));
}

async function main() {
  const a = parseArgs(process.argv.slice(2), { flags: ['once'] });
  if (!a.queue) throw new Error('--queue is required');
  const redis = new Redis(a.redis ?? process.env.ZSCHED_REDIS_URL ?? 'redis://127.0.0.1:6379/0');
  const retryDelay = intOrUndefined(a.retryDelayMs, 'retry-delay-ms');
  const worker = new Worker(redis, a.queue, handlers, {
    consumer: a.consumer,
    maxAttempts: intOrUndefined(a.maxAttempts, 'max-attempts'),
    visibilityTimeoutMs: intOrUndefined(a.visibilityTimeoutMs, 'visibility-timeout-ms'),
    retryDelayMs: retryDelay === undefined ? undefined : () => retryDelay,
  });
  try {
    if (a.once) {
      for (const o of await worker.tick({ count: intOrUndefined(a.count, 'count') ?? 100 })) report(o);
      return;
    }
    const stop = new AbortController();
    process.once('SIGTERM', () => stop.abort());
    process.once('SIGINT', () => stop.abort());
    await worker.setup();
    console.log(JSON.stringify({ event: 'ready', consumer: worker.consumer }));
    await worker.run(stop.signal, { blockMs: 200, onOutcome: report });
  } finally {
    redis.disconnect();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`worker failed: ${err.stack ?? err.message}`);
    process.exit(1);
  },
);
