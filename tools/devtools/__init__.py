"""Development helpers: ``make demo``, the workflow linters, the local stand-in builder image."""
