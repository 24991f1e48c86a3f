"""llama.cpp's HTTP server from the prebuilt `xllamacpp` wheel, as a process of its own.

    python bench/servers/llamacpp_server.py MODEL.gguf PORT [--parallel N] [--threads N] [--alias NAME]

xllamacpp's `Server(params)` starts llama.cpp's own server (the one `llama-server` runs: OpenAI
endpoints, SSE with [DONE], `/health`, `/metrics`) on a background thread of this process; this
script only fills its parameters and keeps the process alive until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import threading


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("port", type=int)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx-per-slot", type=int, default=4096)
    ap.add_argument("--alias", default="tiny-llama")
    ap.add_argument("--http-threads", type=int, default=0)
    args = ap.parse_args()

    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = args.model
    p.model_alias = {args.alias}
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx_per_slot * args.parallel  # shared by the slots
    p.cont_batching = True
    p.endpoint_metrics = True
    p.use_jinja = True
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.n_threads_http = args.http_threads or 4 * args.parallel + 4
    p.warmup = False
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(p)
    print(f"llama.cpp server listening at {server.listening_address}", flush=True)
    while not stop.wait(0.5):
        pass


if __name__ == "__main__":
    main()
