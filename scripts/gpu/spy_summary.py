"""Sum up ``py-spy record --subprocesses --format raw`` of a campaign: where each kind of process spent
its (active) samples, in thread-seconds. Kinds: the campaign's main process, its shards (Hypothesis,
the hub), the zygote, and the workers (forked from the zygote, or started directly), told apart by their stacks.
Record (py-spy needs ptrace rights over the processes: root, or kernel.yama.ptrace_scope=0; --idle is
left out, so samples are of threads running Python, not waiting):
  py-spy record --subprocesses --format raw --rate 100 -o RAW.txt -- python -m fuzzrunner fuzz ...
Usage: python scripts/gpu/spy_summary.py RAW.txt [--top 25] [--rate HZ]
"seconds" below are thread samples over the rate: a process with two busy threads counts twice. Paths
are shortened after site-packages/, the Python library, and this checkout's folder (summarise a profile
in a checkout at the same path as the one it was recorded in, or read the full paths).
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter, defaultdict

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + "/"  # the checkout
_PROCESS = re.compile(r'process \d+:"[^"]*";?')
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def kind_of(frames: list[str]) -> str:
    text = ";".join(frames)
    if "_become_worker" in text or "worker.py" in text and "main (fuzzrunner/engine/worker.py" in text:
        return "worker"
    if "fuzzrunner.engine.worker" in frames[0]:
        return "worker"
    if "zygote" in frames[0]:
        return "zygote"
    if "spawn_main" in text or "_shard_process" in text:
        return "shard"
    return "main"


def short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    f = m["file"]
    for cut in ("site-packages/", _ROOT, "/lib/python3"):
        if cut in f:
            f = f.split(cut, 1)[1].split("/", 1)[-1] if cut == "/lib/python3" else f.split(cut, 1)[1]
    return f"{m['fn']} ({f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--rate", type=float, default=100.0, help="py-spy's sampling rate (samples/s)")
    args = ap.parse_args()
    if args.rate <= 0:
        ap.error("--rate must be above 0 (py-spy's samples per second)")
    try:
        lines = open(args.raw).read().splitlines()
    except OSError as e:
        raise SystemExit(f"spy_summary: cannot read {args.raw}: {e.strerror}") from None
    total: Counter = Counter()
    incl: dict = defaultdict(Counter)
    self_: dict = defaultdict(Counter)
    pids: dict = defaultdict(set)
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        procs = [p.rstrip(";") for p in _PROCESS.findall(stack)]
        frames = [p for p in _PROCESS.sub("", stack).split(";") if p]
        if not frames:
            continue
        k = kind_of(procs[-1:] + frames)
        pids[k].add(procs[-1].split(":")[0] if procs else "?")
        c = int(n)
        total[k] += c
        seen = set()
        for f in frames:
            s = short(f)
            if s not in seen:
                incl[k][s] += c
                seen.add(s)
        self_[k][short(frames[-1])] += c
    if not total:
        raise SystemExit(f"spy_summary: no stack lines in {args.raw} (record it with --format raw)")
    for k, n in total.most_common():
        print(f"\n=== {k}: {n} samples ({n / args.rate:.1f} thread-s), {len(pids[k])} process(es)")
        print("  inclusive:")
        for s, c in incl[k].most_common(args.top):
            print(f"    {100 * c / n:5.1f}%  {s}")
        print("  self:")
        for s, c in self_[k].most_common(args.top // 2):
            print(f"    {100 * c / n:5.1f}%  {s}")


if __name__ == "__main__":
    main()
