#!/usr/bin/env node
// Cancel a delayed run or show where a run is.
//   node runs.js cancel --redis URL --queue Q --run-id ID   -> {"run_id", "code"} (cancel.lua codes)
//   node runs.js show   --redis URL --queue Q --run-id ID   -> {"run_id", "state", ...}
//   node runs.js reschedule --queue Q --run-id ID (--run-at-ms MS | --delay-ms MS)
//                                                           -> {"run_id", "code", "outcome", "moved", "due_ms"}
//   node runs.js cancel-run --queue Q --run-id ID            -> {"run_id", "code", "outcome"} (revoke.lua)
import Redis from 'ioredis';

import { Client } from './lib/client.js';
import { intOrUndefined, parseArgs } from './lib/cli.js';

async function main() {
  const [command, ...rest] = process.argv.slice(2);
  const a = parseArgs(rest);
  if (!['cancel', 'cancel-run', 'show', 'reschedule'].includes(command) || !a.queue || !a.runId) {
    throw new Error('usage: runs.js cancel|cancel-run|show|reschedule --queue Q --run-id ID [--redis URL]');
  }
  const redis = new Redis(a.redis ?? process.env.ZSCHED_REDIS_URL ?? 'redis://127.0.0.1:6379/0');
  try {
    const client = new Client(redis, a.queue);
    if (command === 'cancel') {
      console.log(JSON.stringify({ run_id: a.runId, code: await client.cancel(a.runId) }));
    } else if (command === 'cancel-run') {
      const r = await client.cancelRun(a.runId);
      console.log(JSON.stringify({ run_id: r.runId, code: r.code, outcome: r.outcome }));
    } else if (command === 'reschedule') {
      const r = await client.reschedule(a.runId, {
        runAtMs: intOrUndefined(a.runAtMs, 'run-at-ms'), delayMs: intOrUndefined(a.delayMs, 'delay-ms'),
      });
      console.log(JSON.stringify({ run_id: r.runId, code: r.code, outcome: r.outcome, moved: r.moved, due_ms: r.dueMs }));
    } else {
      const { envelope, ...run } = await client.getRun(a.runId);
      console.log(JSON.stringify({ ...run, task: envelope?.task, attempt: envelope?.attempt }));
    }
  } finally {
    redis.disconnect();
  }
}

main().catch((err) => {
  console.error(`runs failed: ${err.message}`);
  process.exit(1);
});
