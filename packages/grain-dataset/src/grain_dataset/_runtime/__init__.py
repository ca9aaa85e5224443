"""_runtime: see README.md beside this file."""
