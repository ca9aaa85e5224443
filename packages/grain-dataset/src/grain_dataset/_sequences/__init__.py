"""_sequences: see README.md beside this file."""
