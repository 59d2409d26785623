"""Following the registry: PyPI's JSON API and torch's index read, the table and recipes refreshed."""
