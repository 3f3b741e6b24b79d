// Example task handlers of the Node worker. A worker runs only names registered here.
import { createInterface } from 'node:readline';

let lines = null;
function nextStdinLine() {
  lines ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  return lines.next();
}

export const handlers = {
  /** Succeeds; the worker prints the payload with the outcome. */
  async echo() {},

  /** Always fails, so the worker retries it and finally dead-letters it. */
  async fail(payload) {
    throw new Error(`boom: ${JSON.stringify(payload)}`);
  },

  /**
   * Holds the run until a line arrives on stdin, then renews its hold once: shows a consumer
   * keeping its hold, or finding that another consumer took the run over (fenced).
   */
  async hold(payload, info) {
    console.log(JSON.stringify({ event: 'started', run_id: info.runId }));
    await nextStdinLine();
    console.log(JSON.stringify({ event: 'renewed', run_id: info.runId, ok: await info.renew() }));
  },
};
