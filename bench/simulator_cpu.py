"""The simulator's own CPU per streamed chunk, without sockets, on a virtual clock.

`bench/simulator_capacity.py` measures a simulator process against a real client, and its figures
move with whatever else runs on the machine. This one drives the simulator's own objects in one
process (its HTTP protocol, streams, `fixed` runner and truth log: the code a request runs) with
`--streams` closed-loop chat streams (200 tokens each, TTFT 0.1 s, ITL 33 ms) whose writes go to a
counting transport, and a virtual clock that jumps from one timer to the next. The work done for
each chunk is then the same on every run, and what it costs can be counted in CPU instructions,
which other processes do not change:

    valgrind --tool=cachegrind --cache-sim=no python bench/simulator_cpu.py --seconds 9
    valgrind --tool=cachegrind --cache-sim=no python bench/simulator_cpu.py --seconds 29

The difference of the two "I refs" counts divided by the difference of the two runs' chunks is
the instructions per chunk of the steady state (start-up cancels out). `--root DIR` measures the
simulator of another checkout (e.g. `git archive COMMIT simulator core | tar -x -C DIR`). Without
valgrind it prints CPU microseconds per chunk, which a loaded machine spreads by 20 %.

`--profile batch` runs the continuous-batching engine instead of `fixed` (vLLM V1 scheduling, one
engine step every 33 ms, every stream in the batch, a KV cache with room for all of them), so
each chunk also pays the engine's step and the KV cache's bookkeeping. A checkout whose batch
runner still runs as an asyncio task (before its engine had KV blocks) is driven by the same
step-then-deliver schedule here, the engine's own `step` doing the work.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--profile", choices=("fixed", "batch"), default="fixed", help="the runner measured (see above)")
    ap.add_argument("--seconds", type=float, default=29.0, help="virtual seconds; chunks are counted after the first 8")
    ap.add_argument(
        "--root",
        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        help="the checkout whose simulator/ and core/ are measured",
    )
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.root))
    from simulator.profiles import load_profile
    from simulator.server import HttpConn, SimServer
    from simulator.truthlog import TruthLog

    clock = [1000.0]
    for name, module in list(sys.modules.items()):  # every simulator module reads the virtual clock
        if name.startswith("simulator") and hasattr(module, "perf_counter"):
            module.perf_counter = lambda: clock[0]

    class Handle:
        cancelled = False

        def cancel(self):
            self.cancelled = True

    class Loop:  # the event loop's timers, on the virtual clock
        def __init__(self):
            self.queue, self.order = [], itertools.count()

        def time(self):
            return clock[0]

        def call_later(self, delay, callback, *args):
            handle = Handle()
            heapq.heappush(self.queue, (clock[0] + max(0.0, delay), next(self.order), callback, args, handle))
            return handle

        def call_soon(self, callback, *args):
            return self.call_later(0.0, callback, *args)

        def create_task(self, coro):  # an older batch runner's loop: not run, see drive_task_runner
            coro.close()
            return Handle()

    tmp = tempfile.mkdtemp(prefix="simulator-cpu-")
    with open(os.path.join(tmp, "cap.yaml"), "w") as f:
        if args.profile == "fixed":
            f.write("kind: fixed\nttft_s: 0.1\nitl_s: 0.033\nmax_model_len: 1000000\n")
        else:  # room for every stream: 1,048,576 KV tokens, in the field the checkout has
            from simulator.profiles import Profile

            room = (
                "num_gpu_blocks_override: 65536\n"
                if "num_gpu_blocks_override" in Profile.model_fields
                else "kv_cache_tokens: 1048576\n"
            )
            f.write(
                "kind: batch\nscheduler: chunked\nmax_num_seqs: 4096\nmax_num_batched_tokens: 65536\n"
                "step_base_s: 0.033\nper_seq_s: 0.0\nper_prefill_token_s: 0.0\nmax_model_len: 4096\n" + room
            )
    loop = Loop()
    srv = SimServer(load_profile(os.path.join(tmp, "cap.yaml")), loop, truth=TruthLog(os.path.join(tmp, "truth.jsonl")))
    if args.profile == "batch" and not hasattr(srv.runner, "_next_step"):
        drive_task_runner(srv.runner, loop, clock)
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hello " * 20}], "max_tokens": 200, "stream": True}
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    counted = {"chunks": 0, "writes": 0, "bytes": 0}

    class Transport:  # counts what the simulator writes; a finished reply sends the next request
        def __init__(self, conn):
            self.conn = conn

        def write(self, data):
            counted["writes"] += 1
            counted["bytes"] += len(data)
            counted["chunks"] += data.count(b"data: ")
            if data.endswith(b"0\r\n\r\n"):
                loop.call_soon(self.conn.data_received, request)

        def get_extra_info(self, name, default=None):
            return default

        def close(self):
            pass

        def abort(self):
            pass

        def is_closing(self):
            return False

    for i in range(args.streams):
        conn = HttpConn(srv)
        conn.connection_made(Transport(conn))
        loop.call_later(i * 2.0 / args.streams, conn.data_received, request)
    end, warm = clock[0] + args.seconds, clock[0] + 8.0
    cpu0 = chunks0 = None
    while loop.queue:
        t, _, callback, cargs, handle = heapq.heappop(loop.queue)
        if t > end:
            break
        clock[0] = max(clock[0], t)
        if cpu0 is None and clock[0] >= warm:
            cpu0, chunks0 = time.process_time(), counted["chunks"]
        if not handle.cancelled:
            callback(*cargs)
    cpu = time.process_time() - cpu0
    chunks = counted["chunks"] - chunks0
    print(
        json.dumps(
            {
                "root": args.root,
                "profile": args.profile,
                "streams": args.streams,
                "seconds": args.seconds,
                "chunks": counted["chunks"],
                "chunks_measured": chunks,
                "writes": counted["writes"],
                "bytes": counted["bytes"],
                "cpu_us_per_chunk": round(1e6 * cpu / chunks, 3) if chunks else None,
            }
        )
    )
    return 0


def drive_task_runner(runner, loop, clock) -> None:
    """An asyncio-task batch runner's loop body on the virtual clock: a step, its tokens to the
    streams at its end, the next step at once; idle until a request is queued."""
    idle = [True]
    queue = runner._enqueue

    def step(t_end):
        eng = runner.engine
        if not eng.has_work():
            idle[0] = True
            return
        t_start = clock[0] if t_end is None else t_end
        duration, emitted = eng.step()
        loop.call_later(t_start + duration - clock[0], deliver, t_start + duration, emitted)

    def deliver(t_end, emitted):
        runner.frontend.observe(t_end, len(emitted))
        for s in emitted:
            s.owner.on_token(s.generated)
        step(t_end)

    def enqueue(seq):
        queue(seq)
        if idle[0]:
            idle[0] = False
            loop.call_soon(step, None)

    runner._enqueue = enqueue


if __name__ == "__main__":
    sys.exit(main())
