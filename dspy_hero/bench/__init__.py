"""Helpers of the side-by-side benchmark harness (`benchmarks/compare.py`): statistics, rollout and
token accounting, method runners, the scripted simulation, and the report writer."""
