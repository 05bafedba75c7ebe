"""backends/redis."""
