"""_map_stages: see README.md beside this file."""
