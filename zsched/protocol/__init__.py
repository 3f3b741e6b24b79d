"""What crosses the wire: key names, the run envelope, run ids, limits and reply codes.

Everything here is pure: no Redis client, no clock. Every other room may use it.
"""
