"""One-off runs: what a caller passes in, the status reader, run controls and outcomes."""
