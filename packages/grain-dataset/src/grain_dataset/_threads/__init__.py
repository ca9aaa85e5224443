"""_threads: see README.md beside this file."""
