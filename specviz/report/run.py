"""Running a report: every prompt of a set (or of one shard of it), both methods with the
same seed, each finished prompt appended to runs.jsonl at once; resume, shards and merge.

A report directory holds:

- manifest.json: what the report runs (the pair, the settings, the prompts, the second
  drafter, the shard), written before the first prompt. A run into a directory whose
  manifest differs is refused with one line; one whose manifest matches resumes after the
  prompts runs.jsonl already holds.
- runs.jsonl: one line per finished prompt (specviz.report.records), flushed as it ends, so
  that an interrupted run (Ctrl-C, a kill) keeps every finished prompt; a line cut short by
  a kill is dropped on resume and its prompt runs again.
- report.json, report.html and traces/ (one JSON trace per run, for the app's Data tab),
  written from runs.jsonl by :func:`write_report`.

Prompt i of the whole set runs with seed settings.seed + i, whatever the shard, so that two
shards merged (:func:`merge`) hold exactly the runs of one unsharded report.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specviz import outfiles
from specviz.config import Settings
from specviz.pair import ModelPair
from specviz.report import stats
from specviz.report.prompts import Prompt, prompts_digest
from specviz.report.records import Record, read_records

MANIFEST, RUNS, REPORT_JSON, REPORT_HTML = (
    "manifest.json",
    "runs.jsonl",
    "report.json",
    "report.html",
)
MANIFEST_FORMAT = "specviz-report-manifest/1"


@dataclass(frozen=True)
class Shard:
    """Shard i of n (0 <= i < n) runs the prompts whose index is i modulo n."""

    i: int = 0
    n: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        i, sep, n = text.partition("/")
        try:
            shard = cls(int(i), int(n))
        except ValueError:
            raise ValueError(f"--shard takes i/n, e.g. 0/4, got {text!r}") from None
        if not sep or shard.n < 1 or not 0 <= shard.i < shard.n:
            raise ValueError(f"--shard i/n needs 0 <= i < n, got {text!r}")
        return shard

    def holds(self, p: Prompt) -> bool:
        return p.index % self.n == self.i

    @property
    def text(self) -> str:
        return f"{self.i}/{self.n}"


@dataclass(frozen=True)
class Plan:
    """What a report runs. pair: the pair's identity (registry name and model ids, dtype,
    device); compare_with: the second drafter or pair as given (None: none)."""

    prompts: list[Prompt]
    settings: Settings
    pair: dict[str, Any]
    compare_with: str | None = None
    compare_settings: Settings | None = None
    shard: Shard = field(default_factory=Shard)
    raw: bool = False
    source: str = ""

    def mine(self) -> list[Prompt]:
        return [p for p in self.prompts if self.shard.holds(p)]

    def seed(self, p: Prompt) -> int:
        return self.settings.seed + p.index

    def identity(self) -> dict[str, Any]:
        """What a resumed run must match (the shard included; merge compares the rest)."""
        return {
            "pair": self.pair,
            "settings": self.settings.to_dict(),
            "compare_with": self.compare_with,
            "compare_settings": (
                None if self.compare_settings is None else self.compare_settings.to_dict()
            ),
            "raw": self.raw,
            "prompts": {"count": len(self.prompts), "digest": prompts_digest(self.prompts)},
            "shard": self.shard.text,
        }

    def manifest(self, about: dict[str, Any]) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "identity": self.identity(),
            "prompts": [p.to_dict() for p in self.prompts],
            "source": self.source,
            "about": about,
        }


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The first key path where two JSON values differ, with both values (None: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            diff = first_difference(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
            if diff:
                return diff
        return None
    if a != b:
        return f"{where}: {json.dumps(a)[:60]} there, {json.dumps(b)[:60]} here"
    return None


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The directory's manifest; None when the directory is new or empty; ValueError when it
    holds files but no readable manifest."""
    path = out / MANIFEST
    if not path.exists():
        if out.exists() and any(out.iterdir()):
            raise ValueError(f"{out} holds files but no {MANIFEST}: not a report directory")
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not a report manifest")
    return manifest


def loaded_models(pair: ModelPair, compare_pair: ModelPair | None = None) -> dict[str, Any]:
    """The models as loaded: name and dtype (for the offline draft, its variant). A
    resumed run and the shards of one report must have loaded the same ones: the offline
    draft's variant is chosen by measurement and may change between processes."""

    def one(m: Any) -> str | None:
        return None if m is None else f"{m.name} ({m.dtype})"

    out = {"target": one(pair.target), "draft": one(pair.draft)}
    if compare_pair is not None:
        out.update(compare_target=one(compare_pair.target), compare_draft=one(compare_pair.draft))
    return out


def check_loaded(out: Path, manifest: dict[str, Any], loaded: dict[str, Any]) -> None:
    """Refuse (one line) to resume with other models than the report began with."""
    diff = first_difference(manifest.get("loaded", loaded), loaded)
    if diff:
        raise ValueError(
            f"{out} was run with other models ({diff}); give another --out, or force the "
            "same draft variant (SPECVIZ_OFFLINE_DRAFT) to resume it"
        )


def check_resumable(out: Path, plan: Plan) -> bool:
    """Whether out already holds this report (resume); ValueError (one line) when it holds
    another one. Reads only: call it before loading any model."""
    manifest = read_manifest(out)
    if manifest is None:
        return False
    diff = first_difference(manifest["identity"], plan.identity())
    if diff:
        raise ValueError(
            f"{out} holds a report of other settings ({diff}); give another --out, "
            "or the same pair, settings and prompts to resume it"
        )
    return True


def load_records(out: Path) -> list[Record]:
    path = out / RUNS
    if not path.exists():
        return []
    return read_records(path.read_text(encoding="utf-8"), str(path))


def _drop_cut_line(path: Path) -> None:
    """Cut a last line whose writing was interrupted, so the next append starts clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with path.open("r+b") as f:
            f.truncate(end)


@dataclass
class Progress:
    """After each finished prompt: done of total (this shard), the prompt's seconds, the
    mean over prompts run in this process, and the estimated seconds left."""

    done: int
    total: int
    record: Record | None
    last_s: float
    mean_s: float
    left_s: float
    resumed: int

    def line(self) -> str:
        p = self.record.prompt if self.record else None
        what = f" {p.id} ({p.category})" if p else ""
        return (
            f"[{self.done}/{self.total}]{what} {self.last_s:.1f} s; "
            f"{self.mean_s:.1f} s per prompt, about {_duration(self.left_s)} left"
        )


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def run_prompt(
    pair: ModelPair,
    plan: Plan,
    p: Prompt,
    compare_pair: ModelPair | None = None,
) -> Record:
    """Both methods on one prompt with its seed, and the second drafter with the same seed
    (and its own baseline where its target is another model), all in turn on this thread
    (engine.interleave: each meets the same load, each baseline as long as its longest
    speculative run)."""
    from specviz.engine import Run, interleave

    t0 = time.perf_counter()
    s = plan.settings.with_(seed=plan.seed(p))
    runs = [
        Run(pair, p.text, s, raw=plan.raw),
        Run(pair, p.text, s.with_(method="ar"), raw=plan.raw),
    ]
    second: list[Run] = []
    if plan.compare_settings is not None:
        cpair = compare_pair or pair
        cs = plan.compare_settings.with_(seed=plan.seed(p))
        second = [Run(cpair, p.text, cs, raw=plan.raw)]
        if cpair.target is not pair.target:
            second.append(Run(cpair, p.text, cs.with_(method="ar"), raw=plan.raw))
    if len(second) == 2:  # another target: each pair paced against its own baseline
        for group in (runs, second):
            for _ in interleave(group):
                pass
    else:
        for _ in interleave(runs + second):
            pass
    spec, ar = runs[0].trace, runs[1].trace
    compare = second[0].trace if second else None
    compare_ar = second[1].trace if len(second) == 2 else None
    return Record(p, s.seed, spec, ar, compare, compare_ar, time.perf_counter() - t0)


def check_prompts(pair: ModelPair, plan: Plan, compare_pair: ModelPair | None = None) -> None:
    """Refuse (ValueError naming the line) a prompt this pair cannot run: too long for the
    model's context with max_new_tokens, or over the deployment's prompt limit."""
    from specviz.engine import check_request

    checks = [(pair, plan.settings)]
    if plan.compare_settings is not None:
        checks.append((compare_pair or pair, plan.compare_settings))
    for p in plan.mine():
        for cpair, s in checks:
            for method in ("spec", "ar"):
                try:
                    check_request(cpair, p.text, s.with_(method=method), raw=plan.raw)
                except ValueError as exc:
                    raise ValueError(f"line {p.line} ({p.id}): {exc}") from None


class ReportRun:
    """Runs a plan into a directory, prompt by prompt; iterate it for Progress. Stopping the
    iteration (Ctrl-C, closing it) keeps every prompt finished so far."""

    def __init__(
        self,
        out: Path,
        plan: Plan,
        pair: ModelPair,
        compare_pair: ModelPair | None = None,
        about: dict[str, Any] | None = None,
        warm: bool = True,
    ) -> None:
        self.out, self.plan, self.pair, self.compare_pair = Path(out), plan, pair, compare_pair
        self.about, self.warm = about or {}, warm
        resumed = check_resumable(self.out, plan)
        loaded = loaded_models(pair, compare_pair)
        if resumed:
            check_loaded(self.out, read_manifest(self.out) or {}, loaded)
        self.out.mkdir(parents=True, exist_ok=True)
        if not resumed:
            _write_json(self.out / MANIFEST, {**plan.manifest(self.about), "loaded": loaded})
        _drop_cut_line(self.out / RUNS)
        self.records = load_records(self.out)
        self.resumed = len(self.records)

    @property
    def remaining(self) -> list[Prompt]:
        done = {r.prompt.index for r in self.records}
        return [p for p in self.plan.mine() if p.index not in done]

    def __iter__(self) -> Iterator[Progress]:
        todo, total = self.remaining, len(self.plan.mine())
        if todo and self.warm:
            self._warm_up(todo[0])
        times: list[float] = []
        with (self.out / RUNS).open("a", encoding="utf-8") as f:
            for p in todo:
                rec = run_prompt(self.pair, self.plan, p, self.compare_pair)
                f.write(rec.to_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
                self.records.append(rec)
                times.append(rec.wall_s)
                mean = sum(times) / len(times)
                left = mean * (total - len(self.records))
                yield Progress(len(self.records), total, rec, rec.wall_s, mean, left, self.resumed)

    def _warm_up(self, p: Prompt) -> None:
        """No timed run pays for first-call set-up (specviz.engine.warm_up)."""
        from specviz.engine import warm_up

        warm_up(self.pair, p.text, self.plan.settings, raw=self.plan.raw)
        if self.plan.compare_settings is not None:
            warm_up(
                self.compare_pair or self.pair, p.text, self.plan.compare_settings, self.plan.raw
            )

    @property
    def complete(self) -> bool:
        return not self.remaining

    def write(self) -> list[Path]:
        """report.json, report.html and the traces, from the records so far (as runs.jsonl
        holds them: a resumed run's report is built exactly as an uninterrupted one's)."""
        return write_report(self.out, load_records(self.out), read_manifest(self.out) or {})


def report_meta(manifest: dict[str, Any], records: list[Record]) -> dict[str, Any]:
    """The deterministic description of a report (no shard, no path, no clock) and the
    rest under "about"."""
    ident = manifest.get("identity", {})
    spec = records[0].spec if records else None
    return {
        "deterministic": {
            "pair": ident.get("pair"),
            "settings": ident.get("settings"),
            "compare_with": ident.get("compare_with"),
            "compare_settings": ident.get("compare_settings"),
            "raw": ident.get("raw"),
            "prompts": ident.get("prompts"),
            "verification": spec.verification if spec else "",
        },
        "about": {
            **manifest.get("about", {}),
            "source": manifest.get("source", ""),
            "shard": ident.get("shard"),
            "loaded": manifest.get("loaded"),
            "models": spec.models if spec else {},
            "compare_models": (
                records[0].compare.models if records and records[0].compare else None
            ),
        },
    }


def write_report(out: Path, records: list[Record], manifest: dict[str, Any]) -> list[Path]:
    """Write report.json, report.html and traces/ into out; return their paths."""
    from specviz.report import html

    report = stats.build(records, report_meta(manifest, records))
    traces = out / "traces"
    traces.mkdir(exist_ok=True)
    for rec in records:
        for which, t in (("spec", rec.spec), ("ar", rec.ar), ("compare", rec.compare)):
            if t is not None:
                outfiles.write_text(out / stats.trace_file(rec.prompt.index, which), t.to_json())
    _write_json(out / REPORT_JSON, report)
    outfiles.write_text(out / REPORT_HTML, html.page(report, records))
    return [out / RUNS, out / REPORT_JSON, out / REPORT_HTML]


def _write_json(path: Path, value: Any) -> None:
    outfiles.write_json(path, value, allow_nan=False)  # a report is strict JSON


def merge(dirs: list[Path], out: Path, say: Callable[[str], None] | None = None) -> list[Path]:
    """Combine the shards of one report into out, as one unsharded run would have written it.
    Refuses (one line) shards of different reports, missing or repeated shards, unfinished
    ones, and an out that holds another report."""
    manifests = []
    for d in dirs:
        m = read_manifest(Path(d))
        if m is None:
            raise ValueError(f"{d} holds no report ({MANIFEST} is missing)")
        manifests.append(m)
    first = manifests[0]["identity"]
    shards = []
    for d, m in zip(dirs, manifests, strict=True):
        ident = dict(m["identity"])
        shard = Shard.parse(ident.pop("shard"))
        diff = first_difference({k: value for k, value in first.items() if k != "shard"}, ident)
        diff = diff or first_difference(manifests[0].get("loaded"), m.get("loaded"))
        if diff:
            raise ValueError(f"{d} is a shard of another report ({diff})")
        shards.append(shard)
    n = shards[0].n
    got = sorted(s.i for s in shards)
    if any(s.n != n for s in shards) or got != list(range(n)):
        have = ", ".join(s.text for s in shards)
        raise ValueError(f"merge needs each of shards 0/{n}..{n - 1}/{n} once; got {have}")
    prompts = [Prompt(**p) for p in manifests[0]["prompts"]]
    records: list[Record] = []
    for d, shard in zip(dirs, shards, strict=True):
        recs = load_records(Path(d))
        want = sum(shard.holds(p) for p in prompts)
        if len(recs) != want:
            raise ValueError(
                f"{d}: shard {shard.text} has {len(recs)} of {want} prompts; finish it first "
                "(run it again with the same --out)"
            )
        records += recs
    records.sort(key=lambda r: r.prompt.index)
    manifest = dict(manifests[0])
    manifest["identity"] = {**first, "shard": Shard().text}
    manifest["about"] = {**manifest.get("about", {}), "merged_from": [str(d) for d in dirs]}
    out = Path(out)
    existing = read_manifest(out)
    if existing is not None:
        diff = first_difference(existing["identity"], manifest["identity"])
        if diff:
            raise ValueError(f"{out} holds another report ({diff}); give another --out")
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / MANIFEST, manifest)
    outfiles.write_text(out / RUNS, "".join(rec.to_json() + "\n" for rec in records))
    if say:
        say(f"merged {len(dirs)} shards: {len(records)} prompts")
    return write_report(out, records, manifest)
