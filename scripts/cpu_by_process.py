"""Where a command's CPU goes, by kind of process: runs the command, reads every process's
user and system time (/proc/PID/stat) every 0.2 s until the command ends, and prints the
CPU seconds each kind of process gained meanwhile (a kind: the process's name, and for
chromium its --type), with the wall time and the whole machine's busy and idle
core-seconds (/proc/stat). A process that starts and ends between two reads is missed;
one that lives 0.2 s or more is counted to its last read.

    python3 scripts/cpu_by_process.py ./scripts/test.sh -q

Linux only. The figures in docs/benchmarks.md ("Set-up and suite times") come from it.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time


def machine() -> tuple[int, int]:
    """(busy, idle) clock ticks of the whole machine so far."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, idle


def kind(pid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().replace(b"\0", b" ").split()
    except OSError:
        return name
    typ = next((a.decode() for a in args if a.startswith(b"--type=")), "")
    return f"{name} {typ}".strip()


def sample(seen: dict[str, tuple[str, float, float]], first: bool) -> None:
    """Each live process's CPU seconds into seen: pid -> (kind, at first read, at last)."""
    hz = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / hz
        if pid in seen:
            seen[pid] = (seen[pid][0], seen[pid][1], cpu)
        else:  # a process running before the command counts from here; a new one from 0
            seen[pid] = (kind(pid, name), cpu if first else 0.0, cpu)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python3 scripts/cpu_by_process.py COMMAND [ARGUMENTS ...]", file=sys.stderr)
        return 2
    hz = os.sysconf("SC_CLK_TCK")
    seen: dict[str, tuple[str, float, float]] = {}
    sample(seen, first=True)
    busy0, idle0 = machine()
    t0 = time.monotonic()
    child = subprocess.Popen(argv)
    while child.poll() is None:
        sample(seen, first=False)
        time.sleep(0.2)
    wall = time.monotonic() - t0
    busy1, idle1 = machine()
    by_kind: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for what, start, last in seen.values():
        if last > start:
            by_kind[what] += last - start
            count[what] += 1
    print(
        f"\nwall {wall:.1f} s; machine busy {(busy1 - busy0) / hz:.1f} core-s, idle "
        f"{(idle1 - idle0) / hz:.1f} core-s; exit code {child.returncode}"
    )
    for what, cpu in by_kind.most_common(12):
        print(f"{cpu:8.1f} core-s  {count[what]:4d} processes  {what}")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
