// Key names of one zsched queue, as docs/protocol.md ("Keys of a queue") lays them out.
// zsched/protocol/keys.py is the reference; tests/integration/test_cross_language.py checks that a run
// enqueued here lands in exactly the keys the Python client writes.

const PREFIX = 'zsched';

/** Name of the consumer group every worker joins on the ready stream. */
export const GROUP = 'workers';

/** The cluster hash tag of a queue (or of one of its partitions). */
export function hashTag(queue, partition = null) {
  if (typeof queue !== 'string' || queue === '' || /[{}]/.test(queue)) {
    throw new Error(`queue name ${JSON.stringify(queue)} must be non-empty and contain no braces`);
  }
  return partition === null ? `{${queue}}` : `{${queue}#${partition}}`;
}

/** Every fixed key of a queue: {delayed, runs, ready, entries, dead, done, stats, wake, ...}. */
export function queueKeys(queue, partition = null) {
  const tag = hashTag(queue, partition);
  const key = (name) => [PREFIX, tag, name].join(':');
  return {
    queue,
    tag,
    delayed: key('delayed'), // the delayed set, key layout 3 (docs/protocol.md, "The delayed set")
    runs: key('runs'), // HASH run_id -> due tag + envelope (see untag in client.js)
    ready: key('ready'), // STREAM of due runs (fields run_id, envelope[, due_ms]: see entryEnvelope)
    entries: key('entries'), // a STRING from zsched 0.3 on (0.2: HASH run_id -> ready stream entry id)
    legacyEntries: key('entries:legacy'), // HASH run_id -> entry id, of the runs zsched 0.2 dispatched
    dead: key('dead'), // STREAM of dead letters
    done: key('done'), // ZSET run_id -> done_at_ms
    stats: key('stats'), // HASH counter -> integer
    wake: key('wake'), // pub/sub CHANNEL
    rule_waiting: key('rule_waiting'), // HASH schedule_id -> a fire waiting for the lease
    cancelled: key('cancelled'), // ZSET run_id -> cancelled_at_ms
    readers: key('readers'), // HASH consumer -> the entry shapes it reads ("plain,tagged")
    control: key('control'), // HASH paused_ms, pause_note, entries (the shape dispatchers write)
    cancelRequest: (runId) => key(`cancel:${runId}`), // STRING, TTL: a running run's cancel request
    lease: (scheduleId) => key(`lease:${scheduleId}`), // STRING, TTL: a rule's overlap lease
  };
}
