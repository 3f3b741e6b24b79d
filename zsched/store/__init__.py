"""How zsched talks to Redis: script loading and the direct EVALSHA path, durable
writes, the delayed-set reader, connections, Sentinel, partition routing and placement.
"""
