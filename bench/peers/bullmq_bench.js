// BullMQ side of the benchmark (make bench-peers). Modes:
//   worker URL QUEUE HITS CONCURRENCY   no-op worker; "<t> <lag>" lines to HITS; "ready" on stdout
//   producer URL QUEUE                  stdin: JSON [[due_ms, payload], ...] per line -> addBulk; "ok"
//   enqueue-rate URL QUEUE N_ONE N_MANY  prints {"one_per_s": x, "many_per_s": y}
// Jobs are added with delay = due - now (at least 1 ms, so every run takes the delayed path).
'use strict';
const fs = require('node:fs');
const readline = require('node:readline');
const { Queue, Worker } = require('bullmq');

const [mode, url, name, ...rest] = process.argv.slice(2);
const u = new URL(url);
const connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
// Recommended for production by BullMQ's docs: bounded auto-removal of finished jobs.
const jobOpts = { removeOnComplete: 1000, removeOnFail: 5000 };

// BENCH_HANDLER (bench/handler.py): "async:MS" or "sync:MS", the handler waits MS ms after
// its hit (Node has no blocking wait that leaves the loop running: both kinds await).
const waitMs = Number((process.env.BENCH_HANDLER || '').split(':')[1] || 0);

function delayOf(due) { return Math.max(1, due - Date.now()); }

async function worker(hitsPath, concurrency) {
  const fd = fs.openSync(hitsPath, 'a');
  let buf = [];
  const flush = () => { if (buf.length) { fs.writeSync(fd, buf.join('')); buf = []; } };
  const timer = setInterval(flush, 20);
  const w = new Worker(name, async (job) => {
    const t = Date.now();
    const at = job.data && job.data.at !== undefined ? job.data.at : t;
    buf.push(`${(t / 1000).toFixed(3)} ${t - at}\n`);
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
  }, { connection, concurrency: Number(concurrency) });
  await w.waitUntilReady();
  process.stdout.write('ready\n');
  const stop = async () => { clearInterval(timer); await w.close(); flush(); process.exit(0); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function producer() {
  const q = new Queue(name, { connection });
  await q.waitUntilReady();
  process.stdout.write('ready\n');
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const items = JSON.parse(line);
    for (let i = 0; i < items.length; i += 1000) {
      await q.addBulk(items.slice(i, i + 1000).map(([due, data]) =>
        ({ name: 'noop', data, opts: { ...jobOpts, delay: delayOf(due) } })));
    }
    process.stdout.write('ok\n');
  }
  await q.close();
}

async function enqueueRate(nOne, nMany) {
  const q = new Queue(name, { connection });
  await q.waitUntilReady();
  const due = Date.now() + 3600000;
  const data = (i) => ({ at: due + i, i, pad: 'x'.repeat(88) });
  await q.add('noop', data(0), { ...jobOpts, delay: 3600000 });
  let t = process.hrtime.bigint();
  for (let i = 0; i < nOne; i++) await q.add('noop', data(i), { ...jobOpts, delay: 3600000 });
  const one = nOne / (Number(process.hrtime.bigint() - t) / 1e9);
  t = process.hrtime.bigint();
  for (let i = 0; i < nMany; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(nMany, i + 1000); j++) {
      jobs.push({ name: 'noop', data: data(j), opts: { ...jobOpts, delay: 3600000 } });
    }
    await q.addBulk(jobs);
  }
  const many = nMany / (Number(process.hrtime.bigint() - t) / 1e9);
  process.stdout.write(JSON.stringify({ one_per_s: one, many_per_s: many }) + '\n');
  await q.close();
}

const run = { worker: () => worker(rest[0], rest[1] || '100'), producer,
              'enqueue-rate': () => enqueueRate(Number(rest[0]), Number(rest[1])) }[mode];
run().catch((e) => { console.error(e); process.exit(1); });
