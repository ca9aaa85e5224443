"""_iter_stages: see README.md beside this file."""
