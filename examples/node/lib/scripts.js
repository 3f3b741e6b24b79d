// Run zsched's Lua scripts the way docs/protocol.md says: EVALSHA by the SHA1 of the file's
// exact bytes, and on a NOSCRIPT reply (script cache flushed, server restarted, failover) EVAL
// the source once, which also caches it again. The .lua files are loaded unchanged from the
// repository: they are the API.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

/** The folder holding the .lua files: $ZSCHED_LUA_DIR, else the repository's lua/. */
export function luaDir() {
  return process.env.ZSCHED_LUA_DIR || resolve(HERE, '..', '..', '..', 'lua');
}

const cache = new Map();

/** {name, source, sha} of lua/<name>.lua. */
export function script(name) {
  let s = cache.get(name);
  if (!s) {
    const source = readFileSync(join(luaDir(), `${name}.lua`));
    s = { name, source, sha: createHash('sha1').update(source).digest('hex') };
    cache.set(name, s);
  }
  return s;
}

function isNoScript(err) {
  return err && typeof err.message === 'string' && err.message.startsWith('NOSCRIPT');
}

/**
 * Run script `name` with KEYS `keys` and ARGV `args`. `binary` = true returns bulk strings as
 * Buffers (needed when the reply carries envelopes, as reclaim's does).
 */
export async function runScript(redis, name, keys, args, { binary = false } = {}) {
  const s = script(name);
  const evalsha = binary ? redis.evalshaBuffer.bind(redis) : redis.evalsha.bind(redis);
  const evalSource = binary ? redis.evalBuffer.bind(redis) : redis.eval.bind(redis);
  try {
    return await evalsha(s.sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (!isNoScript(err)) throw err;
    return evalSource(s.source, keys.length, ...keys, ...args);
  }
}
