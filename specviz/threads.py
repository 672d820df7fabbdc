"""How many threads the model's CPU work runs on, on a machine it shares.

torch's CPU kernels split each operation over a team of OpenMP threads that meet at a
barrier when it ends. When another runnable thread competes for the cores (another process,
even at nice 19, or the app's own server threads), a member of the team is off its core for
a scheduler slice at many of those barriers, and a decode step that takes 24 ms on two free
cores takes over a second (docs/deploying.md has the table). One thread per free core has
no such wait.

:class:`ThreadPolicy` measures, never guesses, what the rest of the machine runs: the CPU
time the cores this process may use spent busy, less the time of the model's own team (the
computing thread and the threads that are not Python threads: OpenMP's workers), over
windows of a quarter second. Between model calls the computing thread sets its count to
the cores the rest leaves free (all of them on a quiet machine, one fewer per busy core, at
least one). Where a container's CPU quota (cgroup v2 ``cpu.max``) is smaller than the CPUs
it sees, the quota is the cores and the container's own usage is the machine.

``SPECVIZ_THREADS`` fixes the count instead ("2"), as does ``OMP_NUM_THREADS`` where
``SPECVIZ_THREADS`` is not set; "auto", the default, adapts. What a run
met is kept in a :class:`Load`: the threads it ran on, and how busy the rest of the machine
was. Linux only; elsewhere the count stays at the cores and nothing is measured.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz.config.deployment import threads_setting

WINDOW_S = 0.25  # one reading of the rest of the machine
DROP = 0.3  # the rest uses more than this of a core: one thread fewer per busy core
RISE = 0.15  # below this, over two windows running: the count goes back up
GAP_S = 0.1  # a rest at least this long: what other processes ran in it sets the next count
BUSY = 0.25  # a run whose rest used more than this of a core, on average, met a busy machine
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
PROC = Path("/proc")


def cpu_info(proc: Path = PROC) -> tuple[str, set[str]]:
    """The CPU's model name as lscpu reads it and its flags (/proc/cpuinfo), else the
    platform's word and no flags."""
    try:
        text = (proc / "cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), set()
    model, flags = "", set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name == "flags" and not flags:
            flags = set(value.split())
    return model or platform.machine(), flags


def quota_cores(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU quota in cores (cgroup v2 ``cpu.max``), or None when it has
    none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def machine_cores() -> int:
    """The cores the model may use: the CPUs it may run on, or the container's quota where
    that is smaller (rounded down, at least one)."""
    cpus = len(usable_cpus())
    quota = quota_cores()
    return max(1, min(cpus, int(quota))) if quota is not None else cpus


def cpu_busy_s(cpus: list[int], proc: Path = PROC) -> tuple[float, float] | None:
    """(busy seconds, elapsed seconds per CPU) summed over the given CPUs since boot, from
    /proc/stat: busy is every state but idle and iowait (steal counts as busy: a host that
    takes the CPU away is other work too)."""
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    want = {f"cpu{i}" for i in cpus}
    busy = total = 0.0
    n = 0
    for line in lines:
        parts = line.split()
        if not parts or parts[0] not in want:
            continue
        ticks = [int(x) for x in parts[1:9]]
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
        n += 1
    if n == 0:
        return None
    return busy * TICK_S, total * TICK_S / n


def cgroup_usage_s(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU time in seconds (cgroup v2 ``cpu.stat``), or None."""
    try:
        for line in (root / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def thread_cpu_s(tid: int, proc: Path = PROC) -> float:
    """One thread of this process: its user and system time in seconds (0 once it ended)."""
    try:
        raw = (proc / "self" / "task" / str(tid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime


def team_tids(computing: int, proc: Path = PROC) -> list[int]:
    """The computing thread and this process's threads that are not Python threads: its
    OpenMP team (and any other native pool, which works for it too)."""
    try:
        tids = [int(t) for t in os.listdir(proc / "self" / "task")]
    except OSError:
        return [computing]
    python = {t.native_id for t in threading.enumerate() if t.native_id is not None}
    return sorted({computing} | {t for t in tids if t not in python})


@dataclass
class Reading:
    """The counters at one moment."""

    at: float  # monotonic seconds
    busy_s: float  # the machine's (or the container's) busy CPU seconds
    team_s: float  # the team's CPU seconds
    process_s: float = 0.0  # this whole process's CPU seconds, every thread


def _outside(a: Reading, b: Reading) -> float:
    """The cores other processes kept busy from reading a to reading b (this process's own
    threads, the app's server among them, left out)."""
    wall = b.at - a.at
    if wall <= 0:
        return 0.0
    return max(0.0, (b.busy_s - a.busy_s) - (b.process_s - a.process_s)) / wall


def _others(a: Reading, b: Reading) -> float:
    """The cores the rest of the machine kept busy from reading a to reading b."""
    wall = b.at - a.at
    if wall <= 0:
        return 0.0
    return max(0.0, (b.busy_s - a.busy_s) - (b.team_s - a.team_s)) / wall


@dataclass
class Load:
    """What a stretch of model work met: the seconds it ran at each thread count, and the
    rest of the machine's CPU use in each window (in cores)."""

    cores: int
    mode: str  # "auto" or "fixed"
    cpu: str = ""  # the CPU's model name
    seconds_at: dict[int, float] = field(default_factory=dict)
    others: list[float] = field(default_factory=list)

    @property
    def others_mean(self) -> float | None:
        return sum(self.others) / len(self.others) if self.others else None

    @property
    def busy(self) -> bool:
        """Whether the rest of the machine used more than BUSY of a core on average."""
        mean = self.others_mean
        return mean is not None and mean > BUSY

    def threads_text(self) -> str:
        """ "2 threads of 2 cores", or "1-2 threads of 2 cores (1 for 40 % of the time)"."""
        total = sum(self.seconds_at.values())
        counts = sorted(self.seconds_at)
        cores = f"of {self.cores} core{'s' if self.cores != 1 else ''}"
        if not counts:
            return f"{torch.get_num_threads()} threads {cores}"
        if len(counts) == 1:
            n = counts[0]
            return f"{n} thread{'s' if n != 1 else ''} {cores}"
        low = counts[0]
        share = self.seconds_at[low] / total if total > 0 else 0.0
        return f"{low}-{counts[-1]} threads {cores} ({low} for {share:.0%} of the time)"

    def busy_text(self) -> str:
        """One line when the machine was busy, else ""."""
        return machine_lines(self.to_dict())[1]

    def to_dict(self) -> dict[str, Any]:
        mean = self.others_mean
        return {
            "cpu": self.cpu,
            "cores": self.cores,
            "threads_mode": self.mode,
            "threads": self.threads_text(),
            "seconds_at_threads": {str(n): round(t, 3) for n, t in self.seconds_at.items()},
            "others_cores": None if mean is None else round(mean, 3),
            "others_cores_max": round(max(self.others), 3) if self.others else None,
            "busy": self.busy,
        }


def machine_lines(machine: dict[str, Any]) -> tuple[str, str]:
    """A run's machine record (Load.to_dict, Trace.machine) as two lines: the threads it
    computed on with the CPU ("" where not recorded), and the warning when the rest of the
    machine was busy ("" when it was not)."""
    if not machine:
        return "", ""
    cpu = machine.get("cpu") or "this CPU"
    threads = f"{machine.get('threads', '?')} ({cpu})"
    mean, top = machine.get("others_cores"), machine.get("others_cores_max")
    if not machine.get("busy") or mean is None:
        return threads, ""
    busy = (
        f"The machine was busy during this run: other work used {mean:.2f} of "
        f"{machine.get('cores', '?')} cores on average"
        + (f" (up to {top:.2f})" if top is not None else "")
        + ", measured from the CPU's counters; these times are not the pair's quiet speed."
    )
    return threads, busy


class ThreadPolicy:
    """The thread count of the threads that compute, set between model calls from what the
    rest of the machine was measured to use. One per process (:data:`POLICY`)."""

    def __init__(self, setting: str | None = None, cores: int | None = None) -> None:
        """setting: "auto" or a count; None reads SPECVIZ_THREADS, else OMP_NUM_THREADS
        (specviz.config.threads_setting; a bad value is a one-line ValueError)."""
        self.cores = cores or machine_cores()
        if setting is None:
            self.fixed = threads_setting()
        elif setting.strip().lower() == "auto":
            self.fixed = None
        else:
            try:
                self.fixed = int(setting)
            except ValueError:
                raise ValueError(f"threads must be 'auto' or a count, got {setting!r}") from None
            if not 1 <= self.fixed <= 256:
                raise ValueError(f"threads must be in 1..256, got {self.fixed}")
        self._cpus = usable_cpus()
        quota = quota_cores()
        self._cgroup = quota is not None and quota < len(self._cpus)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._loads: list[Load] = []

    @property
    def mode(self) -> str:
        return "auto" if self.fixed is None else "fixed"

    @property
    def top(self) -> int:
        """The count on a quiet machine: the fixed count, else every core."""
        return self.fixed if self.fixed is not None else self.cores

    # --- on the computing thread -------------------------------------------------------

    def pace(self) -> int:
        """Between model calls, on the thread that computes: take a reading once a window
        has passed and set this thread's count from it. The first reading after a rest (or
        the thread's first) sets the count from what other processes ran while it waited,
        so that a run does not start on a core another program holds. Returns the count."""
        st = self._state()
        now = time.monotonic()
        if st["last"] is not None and now - st["last"].at < WINDOW_S:
            return st["threads"]
        reading = self._read(st)
        if reading is None:  # not measurable here: the count stays as set
            return st["threads"]
        prev, st["last"] = st["last"], reading
        if prev is None:
            gap, st["gap"] = st["gap"], None
            if gap is not None and reading.at - gap.at >= GAP_S and self._adapts(st):
                outside = _outside(gap, reading)
                st["quiet"] = 0
                self._set(st, max(1, self.cores - int(outside + 1 - DROP)))
            return st["threads"]
        others = _others(prev, reading)
        self._record(st["threads"], reading.at - prev.at, others)
        if self._adapts(st):
            self._decide(st, others)
        return st["threads"]

    def _adapts(self, st: dict[str, Any]) -> bool:
        return self.fixed is None and st["held"] is None

    def rest(self) -> None:
        """On the thread that computes, when it goes idle: its next window starts at its
        next pace, and only other processes' use meanwhile sets the count it starts at:
        this process's own work while the thread waited (a page being built) is not the
        load its next call meets."""
        st = self._state()
        st["last"], st["gap"] = None, self._read(st)

    def _decide(self, st: dict[str, Any], others: float) -> None:
        """One fewer thread per core the rest keeps busy (more than DROP of it); back up
        only after two windows running where it leaves room by the stricter RISE."""
        n = st["threads"]
        down = max(1, self.cores - int(others + 1 - DROP))
        up = max(1, self.cores - int(others + 1 - RISE))
        if down < n:
            st["quiet"] = 0
            self._set(st, down)
        elif up > n:
            st["quiet"] += 1
            if st["quiet"] >= 2:
                st["quiet"] = 0
                self._set(st, up)
        else:
            st["quiet"] = 0

    def _set(self, st: dict[str, Any], n: int) -> None:
        st["threads"] = n
        torch.set_num_threads(n)

    def _state(self) -> dict[str, Any]:
        st = getattr(self._local, "state", None)
        if st is None:
            st = {
                "tid": threading.get_native_id(),
                "last": None,
                "threads": self.top,
                "quiet": 0,
                "held": None,
                "gap": None,
            }
            self._local.state = st
            torch.set_num_threads(self.top)
            st["gap"] = self._read(st)  # the first pace reads the span from here
        return st

    def _read(self, st: dict[str, Any]) -> Reading | None:
        if self._cgroup:
            busy = cgroup_usage_s()
        else:
            got = cpu_busy_s(self._cpus)
            busy = None if got is None else got[0]
        if busy is None:
            return None
        team = sum(thread_cpu_s(t) for t in team_tids(st["tid"]))
        return Reading(time.monotonic(), busy, team, time.process_time())

    def reset(self) -> int:
        """The computing thread starts anew at the top count (its first reading comes at its
        next pace). Returns the count."""
        st = self._state()
        st["last"], st["quiet"] = None, 0
        self._set(st, self.top)
        return st["threads"]

    @contextmanager
    def holding(self, n: int | None = None) -> Iterator[int]:
        """The calling thread computes at n threads (the top count by default) meanwhile,
        whatever the machine does: measurements that must be comparable (the draft choice,
        ``costs``) hold one count. Yields the count."""
        st = self._state()
        before, held = st["threads"], st["held"]
        st["held"] = n or self.top
        self._set(st, st["held"])
        try:
            yield st["held"]
        finally:
            st["held"] = held
            self._set(st, before)

    # --- what a stretch met --------------------------------------------------------------

    @contextmanager
    def watch(self) -> Iterator[Load]:
        """On the thread that computes: a :class:`Load` of what the stretch met. The windows
        read by :meth:`pace` meanwhile fill it; where none was, one reading spans the
        stretch."""
        st = self._state()
        load = Load(self.cores, self.mode, cpu_info()[0])
        start = self._read(st)
        with self._lock:
            self._loads.append(load)
        try:
            yield load
        finally:
            with self._lock:
                # by identity: two stretches' Loads may be equal by value (nested, interleaved)
                self._loads = [other for other in self._loads if other is not load]
            end = self._read(st)
            if not load.others and start is not None and end is not None:
                wall = end.at - start.at
                if wall > 0:
                    load.seconds_at[st["threads"]] = wall
                    load.others.append(_others(start, end))

    def _record(self, threads: int, wall: float, others: float) -> None:
        with self._lock:
            for load in self._loads:
                load.seconds_at[threads] = load.seconds_at.get(threads, 0.0) + wall
                load.others.append(others)


POLICY = ThreadPolicy.__new__(ThreadPolicy)  # built on first use: no /proc read at import


def policy() -> ThreadPolicy:
    """The process's policy, built from SPECVIZ_THREADS on first use."""
    global POLICY
    if not hasattr(POLICY, "cores"):
        with _BUILD:
            if not hasattr(POLICY, "cores"):
                POLICY = ThreadPolicy()
    return POLICY


_BUILD = threading.Lock()
