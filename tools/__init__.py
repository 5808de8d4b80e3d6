"""The project's own tools (not installed with the package): generators of the docs' tables, checked by tests."""
