"""Every offline draft variant the choice can pick (specviz.backend.draft_choice.VARIANTS),
on a tiny pair, under every CPU capability this machine can emulate: its packages are built by the
set-up step's code in one process and loaded in another, and greedy speculative output on
them equals greedy autoregressive output, every call after each prefill on a package.

Capabilities. ``ATEN_CPU_CAPABILITY`` (default, avx2, avx512) changes the packages' key
(specviz.backend.packages.capability) and the vector code inductor generates: inductor
reads the same variable (torch._inductor.cpu_vec_isa.pick_vec_isa, while its ``cpp.simdlen``
is unset; "default" is its scalar code), and under avx2 and avx512 specviz's kernel library
is built for that capability and called (specviz.backend.kernels). So each of these builds its own
packages. ``ONEDNN_MAX_CPU_ISA`` (AVX2, AVX512_CORE, AVX512_CORE_AMX) changes only
oneDNN's kernels at run time (the eager path's 16-bit products, and whether a bf16 or fp16
copy widens its products: specviz.backend.offline.cpu_has_16bit): under each, the eager greedy
runs, and the packages built under this machine's own capability (the variable unset) are
loaded. A capability this CPU lacks (/proc/cpuinfo) is skipped, and says so.

The target's packages (1 and GAMMA + 1 positions) are shared by every variant, each draft
has its 1 and 2. Builds run two processes at once (tests/variant_check.py); each
capability's check runs in a fresh process once its builds are done. A variant that cannot
be packaged (dyn8: torch.ao's packed int8 layers do not export) must be refused by the
set-up step with one line per package and its reason recorded, not skipped.

16 packages per capability, each about 10 s of one core's time (an export, inductor's code
generation and a C++ compile): about 10 minutes of CPU time in all, 9 to 16 minutes on 2
busy cores. So the module is marked ``variants``, which tests/conftest.py deselects unless
the marker expression names it: ``pytest -m variants tests/test_variants.py`` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specviz.backend.draft_choice import VARIANTS
from tests import variant_check as vc

# the module's jobs run in its first test's fixture: 5 to 10 minutes on 2 cores
pytestmark = [pytest.mark.variants, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
# CPU flags each emulated capability needs (ATen's own tests for AVX2 and AVX-512; oneDNN's
# for its ISAs).
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
ATEN = {"default": (), "avx2": ("avx2", "fma"), "avx512": AVX512}
ONEDNN = {
    "AVX2": ("avx2", "fma"),
    "AVX512_CORE": AVX512,
    "AVX512_CORE_AMX": (*AVX512, "amx_tile", "amx_bf16", "amx_int8"),
}
# The variants whose packages must build: all but dyn8, whose layers torch.export cannot
# trace (specviz.backend.offline.quantize_dynamic_int8)
PACKAGED = [v for v in VARIANTS if v != "dyn8"]
JOB_TIMEOUT_S = 900
RUNNING_AT_ONCE = 2


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return set()


FLAGS = cpu_flags()


def lacks(needs: tuple[str, ...]) -> list[str]:
    return [f for f in needs if f not in FLAGS]


def own_capability() -> str | None:
    """The ATEN_CPU_CAPABILITY that torch picks here unset: the widest this CPU has."""
    return next((c for c in ("avx512", "avx2") if not lacks(ATEN[c])), None)


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "SPECVIZ_CACHE")
    }
    # two processes at once on two cores: one thread each
    env.update(SPECVIZ_CACHE=str(cache), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", **extra)
    return env


class Job:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], after=()) -> None:
        self.name, self.argv, self.env, self.after = name, argv, env, list(after)
        self.proc: subprocess.Popen | None = None
        self.t0 = self.seconds = 0.0
        self.out: dict | None = None
        self.stderr = ""
        self.rc: int | None = None

    def start(self, folder: Path) -> None:
        self.log = open(folder / f"{self.name}.err", "w+")  # noqa: SIM115
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.variant_check", *self.argv],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def finish(self) -> None:
        try:
            out, _ = self.proc.communicate(timeout=max(1.0, JOB_TIMEOUT_S - self.elapsed()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.seconds = self.elapsed()
        self.rc = self.proc.returncode
        self.log.seek(0)
        self.stderr = self.log.read()
        self.log.close()
        try:
            self.out = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.out = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def run_jobs(jobs: list[Job], folder: Path) -> None:
    """Run the jobs, at most RUNNING_AT_ONCE at a time, each once the jobs it comes after
    have ended, in the order given."""
    waiting, running, done = list(jobs), [], set()
    while waiting or running:
        for job in list(waiting):
            if len(running) < RUNNING_AT_ONCE and all(a in done for a in job.after):
                waiting.remove(job)
                job.start(folder)
                running.append(job)
        if not running and waiting:
            raise RuntimeError(f"jobs waiting on nothing that runs: {[j.name for j in waiting]}")
        time.sleep(0.2)
        for job in list(running):
            if job.proc.poll() is not None or job.elapsed() > JOB_TIMEOUT_S:
                job.finish()
                running.remove(job)
                done.add(job.name)


def halves(items: list[str]) -> tuple[list[str], list[str]]:
    """Two lists of about as many packages each (dyn8 builds none)."""
    a, b = [], []
    for item in items:
        (a if len(a) <= len(b) else b).append(item)
    return a, b


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every job's output, by name: builds per capability, then checks in fresh processes."""
    folder = tmp_path_factory.mktemp("variants")
    jobs: list[Job] = []
    own = own_capability()
    order = [c for c in (own, "avx2", "avx512", "default") if c is not None]
    order = list(dict.fromkeys(c for c in order if not lacks(ATEN[c])))
    for cap in order:
        env = _env(folder / cap, ATEN_CPU_CAPABILITY=cap)
        first = []
        if cap in ("avx2", "avx512"):  # the kernel library, once, before the builds calling it
            jobs.append(Job(f"{cap}-kernels", ["kernels"], env))
            first = [f"{cap}-kernels"]
        a, b = halves(["target", *VARIANTS])
        jobs.append(Job(f"{cap}-build-a", ["build", *a], env, first))
        jobs.append(Job(f"{cap}-build-b", ["build", *b], env, first))
        jobs.append(
            Job(f"{cap}-check", ["check", *VARIANTS], env, [f"{cap}-build-a", f"{cap}-build-b"])
        )
        if cap == own:  # oneDNN's ISAs: this machine's own packages, ATen's capability unset
            for isa in ONEDNN:
                if not lacks(ONEDNN[isa]):
                    jobs.append(
                        Job(
                            f"onednn-{isa}-check",
                            ["check", *VARIANTS],
                            _env(folder / cap, ONEDNN_MAX_CPU_ISA=isa),
                            [f"{cap}-build-a", f"{cap}-build-b"],
                        )
                    )
    t0 = time.perf_counter()
    run_jobs(jobs, folder)
    by_name = {j.name: j for j in jobs}
    summary = {j.name: round(j.seconds, 1) for j in jobs}
    summary["all"] = round(time.perf_counter() - t0, 1)
    print(f"\nvariant jobs (s): {json.dumps(summary)}")
    for j in jobs:
        if j.name.endswith("-check") and j.out is not None:
            print(f"{j.name}: {j.out['capability']} {json.dumps(j.out['identity'])}")
    return by_name


def _job(results, name: str) -> Job:
    job = results[name]
    assert job.rc == 0 and job.out is not None, (
        f"{name} ended with code {job.rc}: {job.stderr[-3000:]}"
    )
    return job


def _builds(results, cap: str) -> dict:
    out = {}
    for half in ("a", "b"):
        got = _job(results, f"{cap}-build-{half}").out
        out.update({k: v for k, v in got.items() if isinstance(v, dict)})
        out["capability"] = got["capability"]
        out["kernels"] = got["kernels"]
    return out


def _needs(cap: str) -> None:
    missing = lacks(ATEN[cap])
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: ATEN_CPU_CAPABILITY={cap} not emulated")


@pytest.mark.parametrize("cap", list(ATEN))
def test_every_variant_but_dyn8_builds_its_packages_and_dyn8_is_refused_in_one_line(results, cap):
    _needs(cap)
    built = _builds(results, cap)
    assert built["capability"] == {"default": "DEFAULT"}.get(cap, cap.upper())
    # under AVX2 and AVX-512 specviz's kernel library is built and named in every package's key
    assert bool(built["kernels"]) == (cap in ("avx2", "avx512"))
    for item in ["target", *PACKAGED]:
        widths = list(vc.TARGET_WIDTHS if item == "target" else vc.DRAFT_WIDTHS)
        got = built[item]
        assert got["built"] == widths and got["refused"] == {}, (item, got)
        assert all(line.startswith("specviz: compiled the") for line in got["lines"]), got
        assert sorted(got["code"]) == [str(w) for w in widths]
        for w, code in got["code"].items():
            isa = code["isa"]  # the vector code inductor generated
            assert ("AVX512" in isa) == (cap == "avx512"), (item, isa)
            assert ("AVX2" in isa) == (cap == "avx2"), (item, isa)
            assert (isa == "INVALID_VEC_ISA") == (cap == "default"), (item, isa)
            # under AVX2 and AVX-512 the int8 drafts' layers and every call of the float32
            # target (its step as its verification) run specviz's ops; elsewhere inductor's
            # reductions
            ops = []
            if cap in ("avx2", "avx512") and item.startswith("w8-"):
                ops = ["int8_linear"]
            elif cap in ("avx2", "avx512") and item == "target":
                ops = ["linear"]
            assert code["ops"] == ops, (item, w, code)
    dyn8 = built["dyn8"]
    assert dyn8["built"] == [] and dyn8["code"] == {}
    assert sorted(dyn8["refused"]) == ["1", "2"]  # recorded: not tried again
    assert len(dyn8["lines"]) == 2
    for w, line in zip((1, 2), dyn8["lines"], strict=True):
        assert f"the draft's {w}-position call could not be compiled: " in line
        assert "\n" not in line and dyn8["refused"][str(w)].startswith("its build failed (")


def _check_greedy(out: dict, stderr: str, capability: str) -> None:
    assert out["capability"] == capability
    rejected = False
    for variant in VARIANTS:
        r = out[variant]
        want = r["eager_ar"]
        assert len(want) == vc.TOKENS
        assert r["eager_spec"] == want, variant
        rejected |= "rejected" in r["statuses"]
        assert r["auto_backend"] == "aoti", variant
        if variant == "dyn8":  # no packages: refused when named, eager beside the target's
            assert r["named_aoti"] and "\n" not in r["named_aoti"]
            assert "cannot trace" in r["named_aoti"], r["named_aoti"]
            assert r["packaged_spec"] == want and r["packaged_ar"] == want
            target, draft = r["calls_spec"]["target"], r["calls_spec"]["draft"]
            assert target["packaged"] == target["after_prefill"] > 0 and target["eager"] == 0
            assert not draft["static"] and draft["packaged"] == 0 and draft["after_prefill"] > 0
            assert draft["took_prompt"]  # an eager cache took the packaged target's keys
            continue
        # on the packages: the fp32 target decides every token, so both equal eager AR
        assert r["packaged_spec"] == want, variant
        assert r["packaged_ar"] == want, variant
        for method, roles in (("spec", ("target", "draft")), ("ar", ("target",))):
            for role in roles:
                calls = r[f"calls_{method}"][role]
                assert calls["static"] and calls["eager"] == 0, (variant, method, role, calls)
                assert calls["packaged"] == calls["after_prefill"] > 0, (variant, method, role)
        assert r["calls_spec"]["draft"]["took_prompt"], variant  # no prefill of its own
        said = [ln for ln in r["said"] if any(s in ln for s in vc.EAGER_LINES)]
        assert not said, (variant, said)
    assert rejected  # some drafts were rejected: rounds that roll the caches back ran too
    bad = [
        ln
        for ln in stderr.splitlines()
        if any(s in ln for s in (*vc.EAGER_LINES, "constants")) and "tiny-dyn8" not in ln
    ]
    assert not bad, bad


@pytest.mark.parametrize("cap", list(ATEN))
def test_greedy_speculative_equals_autoregressive_on_each_variants_packages_in_a_fresh_process(
    results, cap
):
    _needs(cap)
    job = _job(results, f"{cap}-check")
    _check_greedy(job.out, job.stderr, {"default": "DEFAULT"}.get(cap, cap.upper()))


@pytest.mark.parametrize("cap", ["avx2", "avx512"])
def test_each_capabilitys_kernel_library_multiplies_and_keeps_each_row_alone(results, cap):
    """The library built for this capability (its own code: AVX2 loops, or AVX-512 tiles)
    computes both ops' products to float32 accuracy at every row count of a decode call,
    and each row bit for bit as the row alone, so the target's step and its verification
    give the same products under each."""
    _needs(cap)
    out = _job(results, f"{cap}-kernels").out
    assert out["wanted"] and out["library"] and out["lines"] == [], out
    ops = out["ops"]
    assert ops["rows_alone"] == {"linear": True, "int8_linear": True}, ops
    assert max(ops["worst_relative_error"].values()) < 1e-5, ops


@pytest.mark.parametrize("isa", list(ONEDNN))
def test_under_each_onednn_isa_the_eager_runs_agree_and_this_cpus_packages_serve(results, isa):
    missing = lacks(ONEDNN[isa])
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: ONEDNN_MAX_CPU_ISA={isa} not emulated")
    own = own_capability()
    assert own is not None  # every oneDNN ISA here needs AVX2 at least
    job = _job(results, f"onednn-{isa}-check")
    _check_greedy(job.out, job.stderr, own.upper())
    # oneDNN's 16-bit products are there from AVX512_CORE with AVX512-BF16 up, not at AVX2
    if isa == "AVX2":
        assert job.out["onednn_bf16"] is False


@pytest.mark.parametrize("cap", list(ATEN))
def test_the_targets_packages_differ_between_widths_by_far_less_than_the_outputs_nearest_tie(
    results, cap
):
    """Greedy spec == AR on the packages rests on the target's 1-position and wide calls
    ranking alike: where they differ, far less than the top-2 gap along the output. (Not
    that they agree bit for bit: the rest of a package is generated per width, and no
    capability gives the same bits on every CPU. Inductor's scalar code did on an AMD EPYC,
    family 25 model 17, and differed by up to 5.3e-5 in 94 % of logits on an Intel Xeon,
    family 6 model 167; docs/compiled.md, Exactness.)"""
    _needs(cap)
    out = _job(results, f"{cap}-check").out
    gap = min(out[v]["min_gap"] for v in VARIANTS)
    ident = out["identity"]
    assert "error" not in ident, ident
    worst = max(ident["first_row_max_abs"], ident["later_rows_max_abs"])
    assert worst < gap / 100, (ident, gap)


def test_a_draft_that_cannot_be_packaged_says_why_in_one_line_under_auto(results):
    """Under auto, a draft the compiled path cannot run (dyn8) runs eager beside the
    packaged target, with one line naming it and why."""
    own = own_capability()
    r = _job(results, f"{own}-check").out["dyn8"]
    assert r["auto_backend"] == "aoti"  # the target keeps its packages
    assert len(r["said"]) == 1 and "dyn8" in r["said"][0], r["said"]
