"""The thread policy on a shared machine (specviz.threads): what it reads from /proc, how it
decides, what a run records, and that a change of thread count mid-run keeps the packaged
path's logits bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from specviz import threads
from specviz.threads import Load, Reading, ThreadPolicy, machine_lines
from specviz.trace import Trace

BUSY = [sys.executable, "-c", "while True: pass"]


def stat_text(per_cpu: list[list[int]]) -> str:
    """A /proc/stat with the given per-CPU tick counts (user nice system idle iowait irq
    softirq steal)."""
    total = [sum(col) for col in zip(*per_cpu, strict=True)]
    lines = ["cpu  " + " ".join(map(str, total + [0, 0]))]
    lines += [f"cpu{i} " + " ".join(map(str, row + [0, 0])) for i, row in enumerate(per_cpu)]
    return "\n".join(lines + ["intr 1 2 3", "procs_running 3"]) + "\n"


def test_busy_seconds_read_only_the_usable_cpus(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(
        stat_text([[100, 0, 50, 800, 50, 0, 0, 0], [10, 0, 0, 980, 0, 0, 0, 10], [500] * 8])
    )
    busy, elapsed = threads.cpu_busy_s([0, 1], tmp_path)
    tick = threads.TICK_S
    assert busy == pytest.approx((150 + 20) * tick)  # idle and iowait are not busy; steal is
    assert elapsed == pytest.approx(1000 * tick)  # per CPU
    assert threads.cpu_busy_s([7], tmp_path) is None  # no such CPU: nothing to read


def test_a_container_quota_is_read_in_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.quota_cores(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.quota_cores(tmp_path) is None
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert threads.cgroup_usage_s(tmp_path) == 2.5


class Script:
    """Readings a test writes: the rest of the machine's use (cores) window by window."""

    def __init__(self, others: list[float], window: float = 0.25) -> None:
        self.others, self.window = others, window
        self.at = self.busy = self.team = 0.0
        self.inside = 0.0  # this process's other threads' CPU seconds (a page being built)
        self.i = 0

    def __call__(self, _st: object) -> Reading:
        if self.i > 0:
            rest = self.others[min(self.i - 1, len(self.others) - 1)]
            self.at += self.window
            self.team += 0.9 * self.window  # the team's own work is never "others"
            self.busy += (rest + 0.9) * self.window
        self.i += 1
        return Reading(self.at, self.busy, self.team, process_s=self.team + self.inside)


def paced(policy: ThreadPolicy, others: list[float], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The counts the policy sets, window by window, on a thread of its own (so that this
    worker's own count is left alone)."""
    script = Script(others)
    monkeypatch.setattr(policy, "_read", script)
    monkeypatch.setattr(threads, "WINDOW_S", 0.0)
    counts: list[int] = []

    def go() -> None:
        for _ in range(len(others) + 1):
            policy.pace()
            counts.append(torch.get_num_threads())

    t = threading.Thread(target=go)
    t.start()
    t.join()
    return counts[1:]


def test_a_busy_core_takes_a_thread_and_a_quiet_machine_gives_it_back(monkeypatch) -> None:
    policy = ThreadPolicy("auto", cores=2)
    counts = paced(policy, [0.0, 0.05, 1.0, 1.0, 0.9, 0.05, 0.05, 0.0], monkeypatch)
    # (the first entry is the span before the first pace) quiet: every core; a busy
    # neighbour: one; back only after two quiet windows running
    assert counts == [2, 1, 1, 1, 1, 2, 2, 2]


def test_with_four_cores_a_busy_core_costs_one_thread(monkeypatch) -> None:
    policy = ThreadPolicy("auto", cores=4)
    counts = paced(policy, [1.0, 1.0, 2.0, 0.2, 0.2, 0.2, 0.0, 0.0], monkeypatch)
    # at 0.2 of a core the rest leaves three cores and more: only the stricter RISE gives 4
    assert counts == [3, 2, 2, 3, 3, 3, 4, 4]


def test_a_run_starts_on_the_cores_other_processes_left_free(monkeypatch) -> None:
    """The first pace (after a rest, or the thread's first) reads the span before it: a
    program busy on a core meanwhile makes the run start on one thread, where two would
    wait at every barrier for a whole scheduler slice."""
    policy = ThreadPolicy("auto", cores=2)
    script = Script([1.0, 1.0])
    monkeypatch.setattr(policy, "_read", script)
    monkeypatch.setattr(threads, "WINDOW_S", 0.0)
    seen: list[int] = []

    def go() -> None:
        seen.append(policy.pace())  # the span since the thread's first use: one core busy
        policy.rest()  # idle: this process's own work meanwhile (pages being built) ...
        script.at += 1.0
        script.busy += 1.0
        script.team += 0.0
        seen.append(policy.pace())  # ... is not another program's: the count stays

    t = threading.Thread(target=go)
    t.start()
    t.join()
    assert seen == [1, 1]
    fresh = ThreadPolicy("auto", cores=2)
    quiet = Script([0.0, 0.0])
    monkeypatch.setattr(fresh, "_read", quiet)
    got: list[int] = []

    def inside() -> None:
        fresh.pace()
        fresh.rest()
        quiet.at += 1.0
        quiet.busy += 0.8  # a page being built in this very process
        quiet.inside += 0.8
        got.append(fresh.pace())

    t = threading.Thread(target=inside)
    t.start()
    t.join()
    assert got == [2]


def test_a_fixed_count_never_moves(monkeypatch) -> None:
    policy = ThreadPolicy("2", cores=2)
    assert paced(policy, [1.5, 1.5, 1.5, 0.0], monkeypatch) == [2, 2, 2, 2]
    assert ThreadPolicy("3", cores=2).top == 3


def test_omp_num_threads_fixes_the_count_and_a_bad_setting_is_one_line(monkeypatch) -> None:
    monkeypatch.delenv("SPECVIZ_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ThreadPolicy().fixed == 1
    monkeypatch.setenv("SPECVIZ_THREADS", "auto")
    assert ThreadPolicy().fixed is None
    monkeypatch.setenv("SPECVIZ_THREADS", "lots")
    with pytest.raises(ValueError, match="SPECVIZ_THREADS must be 'auto' or a count"):
        ThreadPolicy()
    with pytest.raises(ValueError, match="in 1..256"):
        ThreadPolicy("0")


def test_held_counts_are_kept_through_any_load(monkeypatch) -> None:
    policy = ThreadPolicy("auto", cores=2)
    monkeypatch.setattr(policy, "_read", Script([2.0] * 4))
    monkeypatch.setattr(threads, "WINDOW_S", 0.0)
    seen: list[int] = []

    def go() -> None:
        with policy.holding(2):
            for _ in range(4):
                seen.append(policy.pace())
        seen.append(torch.get_num_threads())

    t = threading.Thread(target=go)
    t.start()
    t.join()
    assert seen == [2, 2, 2, 2, 2]


def test_a_busy_process_beside_is_measured(monkeypatch) -> None:
    """A real busy loop in another process: the windows read it as at least half a core
    busy (more where the other test worker computes too), and the run is said busy."""
    policy = ThreadPolicy("auto", cores=len(threads.usable_cpus()))
    busy = subprocess.Popen(BUSY)
    got: list[Load] = []

    def go() -> None:
        time.sleep(0.3)  # the loop is running
        with policy.watch() as load:
            end = time.monotonic() + 1.2
            while time.monotonic() < end:
                time.sleep(0.05)
                policy.pace()
        got.append(load)

    try:
        t = threading.Thread(target=go)
        t.start()
        t.join()
    finally:
        busy.kill()
        busy.wait()
    load = got[0]
    assert load.others and load.others_mean is not None
    assert load.others_mean >= 0.6
    assert load.busy and "The machine was busy during this run" in load.busy_text()
    assert sum(load.seconds_at.values()) == pytest.approx(1.2, abs=0.4)


def test_the_team_s_own_work_is_not_counted_as_others() -> None:
    """The computing thread burning a core shows in the team's time, not in the rest's."""
    me = threading.get_native_id()
    before = sum(threads.thread_cpu_s(t) for t in threads.team_tids(me))
    cpu0 = time.thread_time()  # this thread's own CPU clock, read another way
    end = time.monotonic() + 10
    while time.thread_time() - cpu0 < 0.4 and time.monotonic() < end:
        pass
    burnt = time.thread_time() - cpu0
    after = sum(threads.thread_cpu_s(t) for t in threads.team_tids(me))
    assert burnt >= 0.4
    assert after - before >= burnt - 3 * threads.TICK_S
    assert me in threads.team_tids(me)
    others = {t.native_id for t in threading.enumerate()} - {me}
    assert not others & set(threads.team_tids(me))  # other Python threads are the rest


def test_machine_lines_and_the_trace_keep_the_record() -> None:
    load = Load(cores=2, mode="auto", cpu="Some CPU")
    load.seconds_at = {2: 0.5, 1: 1.5}
    load.others = [1.0, 0.9, 1.1]
    d = load.to_dict()
    assert d["threads"] == "1-2 threads of 2 cores (1 for 75% of the time)"
    threads_line, busy = machine_lines(d)
    assert threads_line == "1-2 threads of 2 cores (1 for 75% of the time) (Some CPU)"
    assert busy.startswith("The machine was busy during this run: other work used 1.00 of 2")
    quiet = Load(cores=2, mode="auto", cpu="Some CPU", seconds_at={2: 1.0}, others=[0.02])
    assert machine_lines(quiet.to_dict()) == ("2 threads of 2 cores (Some CPU)", "")
    assert machine_lines({}) == ("", "")


def test_a_trace_round_trips_its_machine_and_refuses_odd_ones(tiny) -> None:
    from specviz.config import Settings
    from specviz.engine import generate

    trace = generate(tiny, "1 2 3", Settings(max_new_tokens=3, seed=0))
    load = Load(cores=2, mode="auto", cpu="CPU", seconds_at={2: 1.0}, others=[0.5])
    trace.machine = load.to_dict()
    back = Trace.from_json(trace.to_json())
    assert back.machine == trace.machine
    data = json.loads(trace.to_json())
    data["machine"] = {"cpu": ["not", "plain"]}
    with pytest.raises(ValueError, match="trace.machine.cpu must be a plain value"):
        Trace.from_dict(data)
    data["machine"] = {f"k{i}": 1 for i in range(20)}
    with pytest.raises(ValueError, match="at most"):
        Trace.from_dict(data)
    del data["machine"]
    assert Trace.from_dict(data).machine == {}  # traces written before it was recorded


def test_the_packaged_target_gives_the_same_logits_at_one_and_two_threads(offline_pair) -> None:
    """The policy may change the count between any two calls of a run: on the packaged path
    each row's sums do not depend on it, so greedy runs keep their tokens and their logit
    gaps bit for bit whatever count each call ran at."""
    from specviz.config import Settings
    from specviz.engine import generate
    from specviz.modelthread import MODEL_THREAD

    pair = offline_pair.with_compile("auto")
    if pair.compile_backend != "aoti":
        pytest.skip("no packages for this machine: the set-up step builds them")
    s = Settings(method="ar", temperature=0.0, max_new_tokens=12)

    def at(n: int) -> Trace:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return generate(pair, "Explain in three sentences why the sky is blue.", s)
        finally:
            torch.set_num_threads(before)

    one, two = MODEL_THREAD.call(lambda: at(1)), MODEL_THREAD.call(lambda: at(2))
    assert one.token_ids == two.token_ids
    assert one.logit_gaps == two.logit_gaps  # floats compared exactly


def test_generate_says_its_threads_and_warns_beside_a_busy_process(capsys, monkeypatch):
    """The command line's comparison names the threads it ran and the CPU; with a busy loop
    beside it, the busy line; each trace of --json records the same."""
    from specviz.cli.main import main
    from tests.tiny import close_pair

    pair = close_pair()
    monkeypatch.setattr(
        "specviz.cli.generate.load_pair_from_args", lambda args, compiled=True: pair
    )
    monkeypatch.setattr(threads, "POLICY", ThreadPolicy("auto", cores=2))
    argv = ["generate", "--prompt", "1 2 3", "--raw", "--temperature", "1.0", "--seed", "3"]
    busy = subprocess.Popen(BUSY)
    before = torch.get_num_threads()  # the policy sets this thread's count: put back after
    try:
        time.sleep(0.3)
        assert main([*argv, "--max-new-tokens", "100", "--compare"]) == 0
        out = capsys.readouterr().out
        assert main([*argv, "--max-new-tokens", "40", "--compare", "--json"]) == 0
        traces = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finally:
        busy.kill()
        busy.wait()
        torch.set_num_threads(before)
    line = next(x for x in out.splitlines() if x.startswith("threads"))
    assert "of 2 cores" in line and f"({threads.cpu_info()[0]})" in line
    assert "The machine was busy during this run: other work used" in out
    assert all(t["machine"]["cores"] == 2 and t["machine"]["busy"] for t in traces)


def test_nested_watches_end_in_any_order() -> None:
    """Two stretches watched at once (a sweep interleaves runs) hold Loads equal by value:
    each ends its own, whichever ends first."""
    policy = ThreadPolicy("2", cores=2)
    outer = policy.watch()
    first = outer.__enter__()
    with policy.watch() as second:
        assert first == second and first is not second
    outer.__exit__(None, None, None)
    assert policy._loads == []


def test_a_bad_thread_setting_stops_the_app_and_the_cli_in_one_line(monkeypatch, capsys) -> None:
    from specviz.cli.main import main
    from specviz.config import Deployment

    monkeypatch.setenv("SPECVIZ_THREADS", "two")
    with pytest.raises(ValueError, match="^environment variable SPECVIZ_THREADS must be 'auto'"):
        Deployment.from_env()
    monkeypatch.setattr(threads, "POLICY", ThreadPolicy.__new__(ThreadPolicy))  # built anew
    assert main(["generate", "--prompt", "1 2 3", "--raw"]) == 2
    err = capsys.readouterr().err
    assert "SPECVIZ_THREADS must be 'auto' or a count" in err and err.count("\n") == 1


def test_the_speed_tab_names_the_threads_and_the_status_warns_of_a_busy_machine(tiny) -> None:
    """The views a finished run is shown with: the Table 1 columns carry the threads row
    (with the CPU), and a run that met a busy machine says so on its status line."""
    from specviz.config import Settings
    from specviz.engine import compare
    from specviz.ui.frames import final_frame
    from specviz.ui.state import Session

    spec, ar = compare(tiny, "1 2 3", Settings(max_new_tokens=12, seed=1))
    session = Session()
    quiet = Load(cores=2, mode="auto", cpu="Some CPU", seconds_at={2: 1.0}, others=[0.02])
    for t in (spec, ar):
        t.machine = quiet.to_dict()
    session.start(spec, ar, "run")
    out = final_frame(session, spec.settings.gamma, measure=False)
    assert "2 threads of 2 cores (Some CPU)" in out["table1"]
    assert "busy" not in out["status"] and "busy" not in out["table1"]
    busy = Load(cores=2, mode="auto", cpu="Some CPU", seconds_at={1: 1.0}, others=[1.2, 0.9])
    for t in (spec, ar):
        t.machine = busy.to_dict()
    out = final_frame(session, spec.settings.gamma, measure=False)
    line = "The machine was busy during this run: other work used 1.05 of 2 cores"
    assert line in out["status"] and line in out["table1"]
    assert "1 thread of 2 cores (Some CPU)" in out["table1"]
