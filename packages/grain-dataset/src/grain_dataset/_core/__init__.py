"""_core: see README.md beside this file."""
