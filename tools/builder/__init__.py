"""The orchestrator: one planned cell through a backend, with the wheels of the cells it needs found or built first."""
