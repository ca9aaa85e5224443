"""_common: see README.md beside this file."""
