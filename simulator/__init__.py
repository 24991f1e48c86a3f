"""An OpenAI-compatible server whose timing comes from a continuous-batching
engine model.  Run it with ``python -m simulator`` (see ``simulator.cli``).

Modules:

* ``cli``       -- command line, start-up line, signals
* ``server``    -- raw asyncio HTTP/1.1 server, request parsing, SSE chunks
* ``runtime``   -- real-time runners (batch engine steps; fixed per-request timers)
* ``engine``    -- the step arithmetic (no clock, no I/O) and the front-end model
* ``kv_cache``  -- KV-cache blocks, preemption's release, the prefix cache and its counters
* ``prefix``    -- the prefix-cache keys of a prompt's full blocks
* ``virtual``   -- virtual-time closed loop over the same engine, for fitting
* ``profiles``  -- profile YAML loading/validation; bundled profiles in ``profiles/``
* ``tokens``    -- prompt token estimate / local tokenizer, output vocabulary
* ``metrics``   -- Prometheus text with vLLM metric names
* ``truthlog``  -- the per-request truth log (JSONL)
* ``faults``    -- fault injection plan

It names itself as servers do: a ``server: llm-simulator/VERSION`` header on every
response and an ``llm_simulator_build_info{version=...}`` gauge on ``/metrics``.
"""

__version__ = "1.1.0"  # raised when the simulator's behaviour (engine model, protocol) changes
