"""The real servers the real-server tests and the benches start: their venvs and the tiny model
(venvs.py, model.py, gguf_convert.py), their command lines (launch.py) and a fixed-length workload
(workload.py). Not test code: bench/ uses it as much as tests/ does."""
