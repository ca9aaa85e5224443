"""The workspace's benchmarks; `python -m benchmarks` writes the comparison report.

Each script here also runs on its own (`python benchmarks/<name>.py`); see README.md.
"""
