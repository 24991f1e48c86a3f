"""The ground floor: values, durations, the one bad-input error and text helpers.

Imports nothing of the project, so every other package may use it (tests/test_layers.py).
"""
