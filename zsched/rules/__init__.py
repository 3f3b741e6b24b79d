"""Recurring rules: triggers (cron, every), DST, the stored spec, rule operations, the
ledger audit, the simulator and rule controls.
"""
