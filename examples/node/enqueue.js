#!/usr/bin/env node
// Enqueue one delayed zsched run from Node.js.
//   node enqueue.js --redis redis://127.0.0.1:6379/0 --queue emails --task send \
//        --payload '{"to":"a@b.c"}' [--run-id ID] [--run-at-ms EPOCH_MS | --delay-ms MS]
// Prints {"run_id": ..., "code": 1|0|2, "duplicate": bool} (codes as in lua/enqueue.lua).
import Redis from 'ioredis';

import { Client } from './lib/client.js';
import { intOrUndefined, parseArgs } from './lib/cli.js';

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (!a.queue || !a.task) throw new Error('--queue and --task are required');
  const redis = new Redis(a.redis ?? process.env.ZSCHED_REDIS_URL ?? 'redis://127.0.0.1:6379/0');
  try {
    const client = new Client(redis, a.queue, { dedupeWindowMs: intOrUndefined(a.dedupeWindowMs, 'dedupe-window-ms') });
    const r = await client.enqueue(a.task, a.payload === undefined ? null : JSON.parse(a.payload), {
      runId: a.runId,
      runAtMs: intOrUndefined(a.runAtMs, 'run-at-ms'),
      delayMs: intOrUndefined(a.delayMs, 'delay-ms'),
      maxAttempts: intOrUndefined(a.maxAttempts, 'max-attempts'),
    });
    console.log(JSON.stringify({ run_id: r.runId, code: r.code, duplicate: r.duplicate }));
  } finally {
    redis.disconnect();
  }
}

main().catch((err) => {
  console.error(`enqueue failed: ${err.message}`);
  process.exit(1);
});
