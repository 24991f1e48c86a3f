"""Statistics over measurements: the block bootstrap of a run's records and the comparison of two
measurements with intervals. No Locust, no report: reports, sweeps and A/B use it alike.
"""
