"""Local webs for tests and benchmarks."""
