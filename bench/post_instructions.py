"""bench/post_instructions ([4.4]): the instructions a message post costs, counted.

Posts/s and CPU ms on a shared machine drift by more than the few percent a change such as
tracing (off) may cost; an instruction count does not. So this bench runs N posts in one
process (bench/posts_in_process.py: the app as gunicorn builds it, Flask's test client, the
real database, Redis and broker) under valgrind's callgrind, which counts every instruction
the process executes, for each checkout beside this one (`--baseline`, worktrees with their
own .venv, as bench/post_path.py) and for this checkout with traces on (`--traced SAMPLER`,
to an OTLP/HTTP sink process: the exporter's work in the web process is counted, the sink's
is not).

Start-up (imports, the app, the session) costs thousands of posts' instructions, and a
little more or less from run to run, so it is not counted: valgrind starts with
instrumentation off, and after `--warmup` posts the process turns it on for the `--posts`
posts (and the export of their spans) and off again, through callgrind's client requests
in a library built here with the C compiler from valgrind's own header. PYTHONHASHSEED is
fixed; what still varies between runs (PostgreSQL's answers, the ids, a collection's
timing) shows as the spread of `--repeat` runs.

    .venv/bin/python -m bench.post_instructions --baseline ../wt-base --traced always_on
        [--posts 200] [--warmup 30] [--repeat 1]

The last line is machine-readable (`key=value` pairs, per checkout label).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.common import arguments, bench_env, machine
from bench.http_throughput import CHECKOUT
from bench.post_path import Checkout, key_name, prepare, sink_running, traced

# A thing of the process's own, so that a second run of the same code counts the same.
HASH_SEED = "0"
POSTS = CHECKOUT / "bench" / "posts_in_process.py"
# callgrind's summary on stderr: "==123== Collected : 4567890".
COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)
# The client requests, callable from Python through ctypes.
CLIENT_REQUESTS = """
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def build_client_requests(scratch: Path) -> Path:
    source, library = scratch / "callgrind_requests.c", scratch / "callgrind_requests.so"
    source.write_text(CLIENT_REQUESTS)
    done = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"cc (valgrind's header, valgrind-dev on some systems):\n{done.stderr}")
    return library


def per_post(checkout: Checkout, library: Path, *, posts: int, warmup: int) -> float:
    """The instructions a post takes in one process of the checkout (start-up not counted)."""
    python = checkout.path / ".venv" / "bin" / "python"
    environment = {**checkout.environment, "DRIFTLESS_BENCH_KEY": checkout.key,
                   "PYTHONHASHSEED": HASH_SEED,
                   "DRIFTLESS_BENCH_CALLGRIND_LIB": str(library)}  # fmt: skip
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         f"--callgrind-out-file={library.parent}/callgrind.out.%p",
         str(python), "-P", str(POSTS), str(warmup), str(posts)],
        env=environment, cwd=checkout.path, capture_output=True, text=True,
    )  # fmt: skip
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{checkout.label}: posts under callgrind:\n{done.stderr[-3000:]}")
    return int(found.group(1)) / posts


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--baseline", action="append", type=Path, default=[],
                        help="another checkout (a worktree with its .venv)")  # fmt: skip
    parser.add_argument("--traced", action="append", type=traced, default=[],
                        metavar="SAMPLER[=ARG]", help="this checkout again, traces on")  # fmt: skip
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=1, help="runs per checkout")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/post_instructions needs valgrind (apt-get install valgrind)")
    print(
        f"bench/post_instructions: {args.posts} posts after {args.warmup}, callgrind,"
        f" {args.repeat} run(s) each; machine: {machine()}"
    )
    env = bench_env(args.admin_database_url)
    scratch = Path(tempfile.mkdtemp(prefix="bench-callgrind-"))
    library = build_client_requests(scratch)
    taken: set[str] = set()
    paths = [p.resolve() for p in args.baseline] + [CHECKOUT]
    with contextlib.ExitStack() as sinks:
        checkouts = [prepare(env, path, i, taken) for i, path in enumerate(paths)]
        for number, variant in enumerate(args.traced, start=len(paths)):
            sink = sinks.enter_context(sink_running(env))
            checkouts.append(prepare(env, variant.path, number, taken, variant=variant, sink=sink))
        counts = {c.label: _measured(c, library, args) for c in checkouts}
        summarize(checkouts, counts, posts=args.posts * args.repeat)
    shutil.rmtree(scratch)


def _measured(checkout: Checkout, library: Path, args: argparse.Namespace) -> list[float]:
    runs = []
    for _ in range(args.repeat):
        runs.append(per_post(checkout, library, posts=args.posts, warmup=args.warmup))
        print(f"  {checkout.label:<12} {runs[-1] / 1e6:10.3f} M instructions a post", flush=True)
    return runs


def summarize(checkouts: list[Checkout], counts: dict[str, list[float]], *, posts: int) -> None:
    first = checkouts[0]
    base = statistics.median(counts[first.label])
    print(f"\n  {'checkout':<12} {'M instr/post':>13} {'x ' + first.label:>11} {'runs':>24}")
    fields = [f"posts={posts}"]
    for checkout in checkouts:
        runs = counts[checkout.label]
        median = statistics.median(runs)
        spread = ", ".join(f"{r / 1e6:.3f}" for r in runs)
        print(f"  {checkout.label:<12} {median / 1e6:13.3f} {median / base:11.4f} {spread:>24}")
        name = key_name(checkout.label)
        fields += [
            f"{name}_instructions_per_post={median:.0f}",
            f"{name}_ratio={median / base:.4f}",
        ]
        if checkout.sink is not None:
            stats = checkout.sink.stats()
            fields.append(f"{name}_spans_exported={stats['spans']}")
    print("post_instructions " + " ".join(fields))


if __name__ == "__main__":
    main()
