"""The zsched command line: one module per noun; each parses, calls the public API, prints."""
