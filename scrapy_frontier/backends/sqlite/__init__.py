"""backends/sqlite."""
