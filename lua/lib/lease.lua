-- BEGIN lease: the end of a rule's overlap lease. Source: lua/lib/lease.lua; `make lua` copies
--   it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- Uses the btree block (bt_tag, bt_add): a script that calls it has both blocks, btree first.
-- A rule's run ended (done, dead or cancelled): free the rule's lease if the run holds it, and
-- when the lease is free start the fire that waited for it (overlap = queue), due now, with
-- the lease. A waiting fire whose run id is live, or done within window_ms (enqueued by hand,
-- or a forced manual fire of its instant), is dropped: that run is the slot's. The caller
-- checked the types of lease (string), waiting (hash), runs (hash), delayed and done (zset;
-- done may be nil: the live check only). Publishes on `wake` when it frees the lease (a
-- catch-up replay may wait for it) or starts a waiting fire.
-- Returns released (1 if this run held the lease), started (the run id started, or '').
local function lease_end(lease, waiting, runs, delayed, wake, done, window_ms, now_ms, sid, run_id)
  local released = 0
  if redis.call('GET', lease) == run_id then
    redis.call('DEL', lease)
    released = 1
    redis.call('PUBLISH', wake, now_ms)
  end
  local started = ''
  if redis.call('EXISTS', lease) == 0 then
    local w = redis.call('HGET', waiting, sid)
    if w then
      local n = tonumber(string.match(w, '^(%d+):'))
      local head = #tostring(n) + 1
      started = string.sub(w, head + 1, head + n)
      redis.call('HDEL', waiting, sid)
      local finished = done and redis.call('ZSCORE', done, started)
      if redis.call('HEXISTS', runs, started) == 1
          or (finished and tonumber(finished) > now_ms - window_ms) then
        started = ''
      else
        redis.call('HSET', runs, started, bt_tag(now_ms, string.sub(w, head + n + 1)))
        bt_add(delayed, {started}, {now_ms})
        redis.call('SET', lease, started) -- no TTL, as fire.lua's
        redis.call('PUBLISH', wake, now_ms)
      end
    end
  end
  return released, started
end
-- END lease
