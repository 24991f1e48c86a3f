"""Runs of runs: a sweep of server settings (one ordinary run per point, ranked with intervals) and
an A/B of one change (interleaved rounds with a verdict per metric). Each run is a `locust` child
process whose results folder is read back through `runfolder/`; the statistics are `stats/`.

`python -m sweeps run ...` and `python -m sweeps ab ...` (docs/tuning.md).
"""
