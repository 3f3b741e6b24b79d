"""The dispatcher: moves due runs onto the stream, fires rules, watches for changes and
beats its heartbeat.
"""
