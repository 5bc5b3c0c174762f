"""The benchmark (`make bench`): bench/README.md. Run its scripts as modules from the repository root."""
