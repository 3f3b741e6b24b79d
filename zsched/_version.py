"""The package version, defined here only: pyproject.toml reads it (setuptools' dynamic
version), `zsched.__version__` and `zsched --version` show it."""

__version__ = "0.4.0"
