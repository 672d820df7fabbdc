"""Forwards compiled ahead of time (specviz.backend.packages, the "aoti" backend): built
once into a store, found by their key, loaded on the model's own tensors, refused when
stale or corrupt, and taken by "auto" on a CPU where they exist.

One tiny pair's packages (target: 1 and 3 positions; draft: 1 and 2, its 1 the target's:
the same shapes) are built once for the module into a temporary store (AOTInductor compiles
C++: about 10 s each on 2 CPU cores).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.backend import cache_len, packages
from specviz.config import Limits, Settings
from specviz.engine import Run, generate
from tests.tiny import close_pair, tiny_pair

GAMMA = 2
PROMPT = "1 2 3"
TOKENS = 24


def _greedy(**kw) -> Settings:
    return Settings(greedy=True, gamma=GAMMA, max_new_tokens=TOKENS, **kw)


def _length(pair) -> int:
    return cache_len(len(pair.encode_prompt(PROMPT)) + TOKENS + GAMMA + 2)


@pytest.fixture(scope="module")
def store(tmp_path_factory, one_thread):
    """A store holding the tiny pair's packages (built here), and the pair."""
    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("aoti")
    mp.setattr(packages, "store", lambda: folder)  # never the machine's own store
    pair = close_pair(noise=0.3)  # greedy rounds both accept and reject
    built = packages.prepare(
        {"target": pair.target.model, "draft": pair.draft.model},
        {"target": (1, GAMMA + 1), "draft": (1, 2)},
        _length(pair),
        report=lambda _m: None,
    )
    yield pair, built
    mp.undo()
    assert not any(  # nothing of this module's reached the machine's store
        packages.model_key(pair.target.model) == k["model"] for k in packages._usable_keys()
    )


def test_the_set_up_step_builds_each_package_once(store):
    pair, built = store
    # the draft has the target's shapes, so its one-position call is the target's package
    assert sorted(built) == ["draft/2", "target/1", "target/3"]
    files = sorted(packages.store().glob("*.pt2"))
    assert len(files) == 3 and all(f.stat().st_size < 20e6 for f in files)  # no weights in them
    again = packages.prepare(
        {"target": pair.target.model, "draft": pair.draft.model},
        {"target": (1, GAMMA + 1), "draft": (1, 2)},
        _length(pair),
        report=lambda _m: None,
    )
    assert again == {}  # found, loaded and probed: nothing built


def test_greedy_speculative_on_packages_equals_greedy_autoregressive_eager(store, capsys):
    pair, _ = store
    compiled = pair.with_compile("aoti")
    assert compiled.compile_backend == "aoti" and "ahead of time" in compiled.describe()["target"]
    want = generate(pair, PROMPT, _greedy(method="ar")).token_ids
    run = Run(compiled, PROMPT, _greedy())
    for _ in run:
        pass
    assert run.trace.token_ids == want and len(want) == TOKENS
    statuses = {d.status for r in run.trace.rounds for d in r.drafted}
    assert {"accepted", "rejected"} <= statuses
    # every call after the prefill ran a package: the forwards counted them, none eager
    fw = packages.packaged(compiled.target, (1, GAMMA + 1), _length(pair))
    assert fw is not None and fw.calls > 0 and fw.eager_calls == 0
    ar = generate(compiled, PROMPT, _greedy(method="ar")).token_ids
    assert ar == want
    assert "no compiled package" not in capsys.readouterr().err


def test_the_packages_read_the_models_own_tensors(store):
    """A package holds code only: the same file serves a model of the same shapes with other
    weights, and gives that model's logits."""
    pair, _ = store
    other = tiny_pair(vocab=16, target_seed=7)
    fn = packages.load(other.target.model, 1, _length(pair))
    assert fn is not None
    compiled = other.with_compile("aoti")
    want = generate(other, PROMPT, _greedy(method="ar")).token_ids
    assert generate(compiled, PROMPT, _greedy()).token_ids == want
    assert want != generate(pair, PROMPT, _greedy(method="ar")).token_ids


def test_a_package_for_another_cpu_is_not_used(store, monkeypatch, capsys):
    pair, _ = store
    monkeypatch.setattr(packages, "capability", lambda: "ANOTHER")
    assert packages.load(pair.target.model, 1, _length(pair)) is None
    assert not packages.available()
    # auto finds none for this CPU: eager, and a run is the same
    assert pair.with_compile("auto").compile_backend is None


def test_a_corrupt_package_is_removed_with_one_line_and_the_run_goes_eager(store, capsys):
    pair = tiny_pair(vocab=16, target_seed=11)  # a fresh model: nothing loaded for it yet
    length = _length(pair)
    # the target's gamma + 1 call (the draft, of the same shapes, shares its 1-position one)
    path = packages.path_of(packages.key(pair.target.model, GAMMA + 1, length))
    meta = path.with_suffix(".json")
    saved, saved_meta = path.read_bytes(), meta.read_bytes()
    try:
        path.write_bytes(b"not a package")
        assert packages.load(pair.target.model, GAMMA + 1, length) is None
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "unusable" in err[0] and "Traceback" not in err[0]
        assert not path.exists()
        auto = pair.with_compile("auto")
        run = Run(auto, PROMPT, _greedy())
        for _ in run:
            pass  # the target has no package now: eager, said once; the draft's are used
        assert run.trace.token_ids == generate(pair, PROMPT, _greedy(method="ar")).token_ids
        err = capsys.readouterr().err
        assert err.count("no compiled package") == 1 and "Traceback" not in err
        # the run's description of its models says which one ran eager, and why
        assert "ran eager: no compiled package for 1/3 positions" in run.trace.models["target"]
        assert "ran eager" not in run.trace.models["draft"]
        # in place of the pair's compiled path, which the draft alone ran
        assert "compiled ahead of time" not in run.trace.models["target"]
        assert "compiled ahead of time" in run.trace.models["draft"]
        from specviz import costs

        costs.remember_pair(auto)  # the page's floors still find the model by its name
        assert costs.remembered(run.trace.models["target"]) is not None
    finally:  # the module's later tests find the store as the set-up left it
        path.write_bytes(saved)
        meta.write_bytes(saved_meta)


def test_auto_takes_the_packages_on_a_cpu_and_leaves_trees_eager(store):
    pair, _ = store
    assert packages.available()
    auto = pair.with_compile("auto")
    assert auto.compile_backend == "aoti" and auto.compile_auto
    tree = Settings(greedy=True, tree=[2, 1], max_new_tokens=8)
    out = generate(auto, PROMPT, tree)  # a tree under auto: the eager path, not refused
    assert out.token_ids == generate(pair, PROMPT, tree.with_(method="ar")).token_ids
    with pytest.raises(ValueError, match="eager path only"):
        generate(pair.with_compile("aoti"), PROMPT, tree)  # named: refused as before


def test_the_set_up_step_can_be_told_not_to_compile(monkeypatch):
    from specviz.models import prepare_offline_packages

    monkeypatch.setenv("SPECVIZ_AOTI", "off")
    assert prepare_offline_packages("cpu") is None


def test_the_key_names_what_the_code_depends_on(store):
    pair, _ = store
    k = packages.key(pair.target.model, 1, 256)
    assert k["torch"] == torch.__version__ and k["cpu"] == packages.capability()
    assert (k["width"], k["length"]) == (1, 256)
    assert packages.path_of(k) != packages.path_of({**k, "width": 3})
    wider = tiny_pair(vocab=32)  # another shape of embedding: another key
    assert packages.key(wider.target.model, 1, 256)["model"] != k["model"]


def test_auto_leaves_a_pair_never_compiled_here_eager_and_quiet(store, capsys):
    pair = tiny_pair(vocab=24)  # shapes no package in the store was built for
    assert packages.available()
    auto = pair.with_compile("auto")
    assert auto.compile_backend is None
    generate(auto, PROMPT, _greedy())
    assert capsys.readouterr().err == ""


def test_the_probe_tells_a_working_forward_from_a_wrong_one(store):
    pair, _ = store
    length = _length(pair)
    model = pair.target.model
    fn = packages.load(model, 1, length)
    assert fn is not None and packages._probe(model, 1, length, fn)

    def shuffled(ids, *state):  # the right logits, ranked wrongly: the worst token first
        out = fn(ids, *state)
        out = out[0] if isinstance(out, (list, tuple)) else out
        return -out

    assert not packages._probe(model, 1, length, shuffled)
    assert not packages._probe(model, 1, length, lambda ids, *s: torch.full((1, 16), float("nan")))


def test_a_cpu_package_computes_linear_as_reductions_with_the_same_result(monkeypatch):
    """Where specviz's kernels are not built, the program a CPU package compiles has no
    linear or matrix product left (each became one reduction per row, its input laid out
    first), and it computes what the module does at one row and at several."""
    from specviz.backend import kernels

    monkeypatch.setitem(kernels._state, "ready", False)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = torch.nn.Linear(16, 24), torch.nn.Linear(24, 8, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(torch.nn.functional.silu(self.up(x)))

    torch.manual_seed(0)
    block = Block()
    for rows in (1, 5):
        x = torch.randn(1, rows, 16)
        program = torch.export.export(block, (x,)).run_decompositions(packages.decompositions())
        ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
        assert not [op for op in ops if "linear" in op or "mm" in op], ops
        assert "prims.inductor_force_stride_order.default" in ops
        with torch.no_grad():
            torch.testing.assert_close(program.module()(x), block(x))


def test_a_cpu_package_computes_int8_and_bf16_weights_as_float32_reductions(monkeypatch):
    """A bf16 linear and ATen's int8 kernel (torch._weight_int8pack_mm, which the int8 draft
    calls where specviz's own kernel is not ready) become the same reductions, widened to
    float32 inside the loop (the int8 weights read as 32-bit words outside AVX-512), and the
    program computes what the module does, to the activations' precision."""
    from specviz.backend import kernels
    from specviz.backend.offline import Int8WeightLinear

    monkeypatch.setitem(kernels._state, "ready", False)

    torch.manual_seed(0)
    for make in (
        lambda lin: Int8WeightLinear(lin, torch.bfloat16),
        lambda lin: lin.to(torch.bfloat16),
    ):
        layer = make(torch.nn.Linear(64, 24, bias=False)).eval()
        for rows in (1, 3):
            x = torch.randn(1, rows, 64).to(torch.bfloat16)
            program = torch.export.export(layer, (x,)).run_decompositions(packages.decompositions())
            ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
            left = [op for op in ops if "int8pack" in op or "linear" in op or "mm" in op]
            assert not left, ops
            words = any("shift" in op for op in ops)
            assert words == (
                packages.capability() != "AVX512" and isinstance(layer, Int8WeightLinear)
            )
            with torch.no_grad():
                got, want = program.module()(x), layer(x)
            assert got.dtype == want.dtype == torch.bfloat16
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_int8_weights_read_as_words_give_the_product_of_the_int8_values(rows):
    """The AVX2 form of the int8 kernel (four weights per 32-bit word, each byte taken out by
    shifts, sign-extended) equals the product of the int8 values as float64, negative and
    extreme codes included, at several rows; and a word form that took the bytes in the
    wrong order would not."""
    torch.manual_seed(rows)
    w = torch.randint(-128, 128, (40, 64), dtype=torch.int8)
    w[0, :4] = torch.tensor([-128, 127, -1, 0], dtype=torch.int8)
    x = torch.randn(rows, 64)
    got = packages._int8_rows_as_words(x, w)
    want = x.double() @ w.double().T
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    swapped = packages._int8_rows_as_words(x, w.view(-1, 4).flip(-1).reshape(40, 64))
    assert not torch.allclose(swapped.double(), want, rtol=1e-3, atol=1e-2)
    scale = torch.rand(40).to(torch.bfloat16)
    torch.testing.assert_close(
        packages._int8pack_mm_as_reductions(x.to(torch.bfloat16), w, scale).float(),
        torch._weight_int8pack_mm(x.to(torch.bfloat16), w, scale).float(),
        rtol=2e-2,
        atol=2e-2,
    )


def test_the_set_up_step_builds_half_in_another_process_and_what_it_missed_here(monkeypatch):
    """prepare hands every other missing package to `elsewhere`, builds the rest here, then
    builds here whatever the other process did not: each package once, a shared one (the
    same model and shape under two roles) once."""
    on_disk: set[tuple[int, int]] = set()
    built_here: list[tuple[int, int]] = []
    monkeypatch.setattr(
        packages, "load", lambda m, w, n, report=None: "fn" if (id(m), w) in on_disk else None
    )
    monkeypatch.setattr(packages, "path_of", lambda k: k["id"])
    monkeypatch.setattr(packages, "key", lambda m, w, n: {"id": (id(m), w)})
    monkeypatch.setattr(packages, "failed", lambda m, w, n: None)

    def build(m, w, n):
        built_here.append((id(m), w))
        on_disk.add((id(m), w))

    monkeypatch.setattr(packages, "build", build)
    target, draft = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    shapes = {"target": (1, 5), "draft": (1, 2), "again": (5,)}
    models = {"target": target, "draft": draft, "again": target}

    class Done:  # the other process built what it was given
        def __init__(self, todo):
            self.todo = todo
            for role, w in todo:
                on_disk.add((id(models[role]), w))

        def wait(self):
            return {f"{r}/{w}": 7.0 for r, w in self.todo}

    given: list = []
    took = packages.prepare(
        models, shapes, 256, lambda _m: None, lambda t: given.append(t) or Done(t)
    )
    assert given == [[("target", 5), ("draft", 2)]]
    assert sorted(built_here) == sorted([(id(target), 1), (id(draft), 1)])
    assert sorted(took) == ["draft/1", "draft/2", "target/1", "target/5"]
    assert took["target/5"] == took["draft/2"] == 7.0

    on_disk.clear(), built_here.clear()

    class Failed:  # the other process built nothing
        def __init__(self, todo):
            pass

        def wait(self):
            return {}

    took = packages.prepare(models, shapes, 256, lambda _m: None, Failed)
    assert sorted(built_here) == sorted(
        (id(m), w) for m, w in [(target, 1), (target, 5), (draft, 1), (draft, 2)]
    )
    assert len(built_here) == 4 and sorted(took) == ["draft/1", "draft/2", "target/1", "target/5"]


def test_int8_weights_whose_input_channels_do_not_come_in_fours_decompose_too(monkeypatch):
    """An int8 layer of 66 input channels (no 32-bit words) takes the plain reductions: the
    program has no int8 kernel left and computes the product of the int8 values and scales
    (against float64: ATen's own int8 kernel does not take 66 channels)."""
    from specviz.backend import kernels
    from specviz.backend.offline import Int8WeightLinear

    monkeypatch.setitem(kernels._state, "ready", False)

    torch.manual_seed(0)
    layer = Int8WeightLinear(torch.nn.Linear(66, 24, bias=False), torch.bfloat16).eval()
    x = torch.randn(1, 2, 66).to(torch.bfloat16)
    program = torch.export.export(layer, (x,)).run_decompositions(packages.decompositions())
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not [op for op in ops if "int8pack" in op or "shift" in op], ops
    with torch.no_grad():
        got = program.module()(x)
    w = layer.weight.double() * layer.scale.double()[:, None]
    want = x.double() @ w.T
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("width", [1, 3])
def test_a_cpu_package_lays_out_the_attentions_query_and_computes_the_same(width):
    """Attention keeps its query as a buffer (inductor_force_stride_order: the query's
    rotary embedding is computed once, not once per cached position), a decode call's
    attention is products and sums (no batched matrix product left for ATen), and the
    decomposed step gives the eager step's logits, masked positions included (a boolean
    mask taken as 0 and 1 would not)."""
    from specviz.backend.aoti import AotiStep, export_step
    from tests.tiny import tiny_model

    model = tiny_model(vocab=16, seed=0, layers=2, num_key_value_heads=1).eval()
    step = AotiStep(model, width, 32)
    args = step.example_args()
    program = export_step(step, args).run_decompositions(packages.decompositions())
    ops = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "aten.scaled_dot_product_attention.default" not in ops
    assert not any("bmm" in op or "_scaled_dot_product" in op for op in ops), ops
    assert ops.count("prims.inductor_force_stride_order.default") >= 2  # one per layer
    calls = [[3, 5, 7][:width], [9, 2, 4][:width], [1, 8, 6][:width]]  # a few calls of cache
    with torch.inference_mode():
        state = [t.clone() for t in args[1:]]
        for ids in calls:
            got = program.module()(torch.tensor([ids]), *state)
        state = [t.clone() for t in args[1:]]
        for ids in calls:
            want = step(torch.tensor([ids]), *state)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("queries", [1, 2, 5, 8])
@pytest.mark.parametrize("kv_heads", [3, 9])
def test_a_decode_calls_attention_as_reductions_is_scaled_dot_product_attention(
    dtype, queries, kv_heads
):
    """_attention_as_reductions against torch's own scaled_dot_product_attention: grouped
    heads (3 key and value heads for 9 query heads) and not, a boolean and an additive
    mask, a given scale; a query row attends only where its mask lets it."""
    g = torch.Generator().manual_seed(queries * 10 + kv_heads)
    q = torch.randn(1, 9, queries, 16, generator=g).to(dtype)
    k = torch.randn(1, kv_heads, 40, 16, generator=g).to(dtype)
    v = torch.randn(1, kv_heads, 40, 16, generator=g).to(dtype)
    mask = torch.zeros(1, 1, queries, 40, dtype=torch.bool)
    mask[..., :20] = True
    for i in range(queries):
        mask[0, 0, i, 20 : 21 + i] = True
    additive = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    gqa = kv_heads < 9
    for m in (mask, additive):
        for scale in (None, 0.3):
            got = packages._attention_as_reductions(q, k, v, m, scale)
            want = torch.nn.functional.scaled_dot_product_attention(
                q.float(),
                k.float(),
                v.float(),
                attn_mask=m if m.dtype == torch.bool else m.float(),
                scale=scale,
                enable_gqa=gqa,
            )
            assert got.dtype == dtype and got.shape == q.shape
            torch.testing.assert_close(got.float(), want, **tol)
    # a value beyond a row's mask never reaches it
    v2 = v.clone()
    v2[:, :, 30:] = 1e4
    assert torch.equal(
        packages._attention_as_reductions(q, k, v2, mask, None)[:, :, :1],
        packages._attention_as_reductions(q, k, v, mask, None)[:, :, :1],
    )


def _w4_draft():
    from specviz.backend.offline import quantize_w4
    from tests.tiny import tiny_model

    base = tiny_model(32, 0, hidden_size=64, intermediate_size=128)
    return quantize_w4(base, torch.bfloat16).eval()


def test_an_int4_package_is_refused_when_it_needs_a_constant_and_loads_when_it_does_not(
    tmp_path, monkeypatch, one_thread
):
    """Inductor's own lowering of the int4 kernel adds a tensor constant (its group size)
    that no loader supplies: such a package is refused at build, naming the constant, and
    nothing is written. With specviz's lowering (the kernel called as it is) the package
    builds, and loads and agrees with the eager draft."""
    import contextlib

    monkeypatch.setattr(packages, "store", lambda: tmp_path)
    draft = _w4_draft()
    with monkeypatch.context() as m:
        m.setattr(packages, "_package_lowerings", contextlib.nullcontext)
        with pytest.raises(packages.Refused, match=r"cannot supply, first 'constant\d*'"):
            packages.build(draft, 1, 64)
    assert not list(tmp_path.iterdir())  # nothing half-written
    packages.build(draft, 1, 64)
    said: list[str] = []
    assert packages.load(draft, 1, 64, said.append) is not None and not said


def test_a_failed_build_is_recorded_and_not_tried_again_until_the_code_changes(
    tmp_path, monkeypatch
):
    """A build that fails is recorded with its reason; the next set-up says so in one line
    and builds nothing, until specviz's compiled-path code (or torch, the CPU, the model)
    changes. A package the fresh process could not use is removed and recorded alike."""
    monkeypatch.setattr(packages, "store", lambda: tmp_path)
    model = tiny_pair(vocab=16, target_seed=21).target.model
    calls: list[int] = []

    def failing(m, w, n):
        calls.append(w)
        raise RuntimeError("the compiler crashed\nmore lines")

    monkeypatch.setattr(packages, "build", failing)
    said: list[str] = []
    took = packages.prepare({"target": model}, {"target": (1,)}, 256, said.append)
    assert took == {} and calls == [1]
    assert packages.failed(model, 1, 256) == "its build failed (RuntimeError: the compiler crashed)"
    said.clear()
    assert packages.prepare({"target": model}, {"target": (1,)}, 256, said.append) == {}
    assert calls == [1] and len(said) == 1 and "not compiled here" in said[0]
    assert "the compiler crashed" in said[0]
    monkeypatch.setattr(packages, "code_digest", lambda: "changed")
    packages.prepare({"target": model}, {"target": (1,)}, 256, said.append)
    assert calls == [1, 1]  # tried again

    def writes(m, w, n):  # a build that writes a file the fresh process then refuses
        calls.append(w)
        p = packages.path_of(packages.key(m, w, n))
        p.write_bytes(b"x")
        return p

    monkeypatch.setattr(packages, "build", writes)
    monkeypatch.setattr(packages, "code_digest", lambda: "changed again")
    said.clear()
    took = packages.prepare(
        {"target": model},
        {"target": (1,)},
        256,
        said.append,
        check=lambda built: {f"{r}/{w}": "its probe disagrees" for r, w in built},
    )
    assert took == {} and not packages.path_of(packages.key(model, 1, 256)).exists()
    assert "its probe disagrees" in packages.failed(model, 1, 256)
    assert any("not kept" in line for line in said)


def test_under_auto_a_model_the_compiled_path_cannot_run_runs_eager_beside_the_other(store, capsys):
    """A draft the compiled path refuses (as the dyn8 draft's packed layers are refused)
    runs eager beside the packaged target under auto, said once in one line, and the run's
    description says why; named, the backend refuses the pair; the output is the target's."""
    import copy
    import dataclasses

    from specviz import pair as pair_module

    pair, _ = store
    draft = copy.deepcopy(pair.draft.model)
    draft._can_compile_fullgraph = False
    draft.specviz_not_compilable = "its layers cannot be traced"
    odd = dataclasses.replace(pair, draft=dataclasses.replace(pair.draft, model=draft))
    pair_module._told_eager.discard(odd.draft.name)
    with pytest.raises(ValueError, match="its layers cannot be traced"):
        odd.with_compile("aoti")
    auto = odd.with_compile("auto")
    assert auto.compile_backend == "aoti" and list(auto.eager_models) == [odd.draft.name]
    odd.with_compile("auto")  # said once
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs eager beside the compiled path" in err[0], err
    run = Run(auto, PROMPT, _greedy())
    for _ in run:
        pass
    assert run.trace.token_ids == generate(pair, PROMPT, _greedy(method="ar")).token_ids
    assert (
        "ran eager: " in run.trace.models["draft"]
        and "cannot be traced" in (run.trace.models["draft"])
    )
    assert "ran eager" not in run.trace.models["target"]
    # the pair says so before any run (the models panel), in place of its compiled path
    said = auto.describe()
    assert said["draft"] == run.trace.models["draft"]
    assert "compiled ahead of time" not in said["draft"]
    assert "compiled ahead of time" in said["target"]
    assert type(run.drafter.lm).__name__ == "CachedLM"
    assert type(run.target_lm).__name__ == "StaticLM"


def test_costs_measure_only_the_gammas_the_packages_serve(store):
    """Under auto a target asked for a width it has no package for runs eager at every
    width: costs left to choose its gammas keeps those whose calls have packages here (the
    store's 1 and GAMMA + 1 positions, and 2: the draft's, of the target's shapes). Every
    gamma is kept off the aoti path, and where --compile aoti builds what is missing."""
    from specviz import costs

    pair, _ = store
    auto = pair.with_compile("auto")
    widths = auto.compiled_widths(auto.target, (1, 2, GAMMA + 1, 9), _length(pair))
    assert widths == (1, 2, GAMMA + 1)
    assert costs.compiled_gammas(auto, PROMPT, (1, GAMMA, 8), TOKENS) == [1, GAMMA]
    assert costs.compiled_gammas(pair, PROMPT, (1, GAMMA, 8), TOKENS) == [1, GAMMA, 8]
    built = pair.with_compile("aoti")
    assert costs.compiled_gammas(built, PROMPT, (1, GAMMA, 8), TOKENS) == [1, GAMMA, 8]
    other = tiny_pair(vocab=8).with_compile("auto")  # shapes never packaged: none ready
    assert other.compile_backend != "aoti" or not costs.compiled_gammas(
        other, PROMPT, (1, GAMMA, 8), TOKENS
    )


# --- verifications wider than the kernels' rows (gamma 8, adaptive gamma) ---------------

WIDE = (5, 9)  # with 1 and GAMMA + 1: adaptive gamma's widths up to a max_gamma of 8


@pytest.fixture(scope="module")
def wide(store, tmp_path_factory):
    """The module's packages and the tiny target's 5- and 9-position calls beside them, in a
    store of their own (the module's store keeps its widths for the tests above)."""
    pair, _ = store
    folder = tmp_path_factory.mktemp("aoti-wide")
    for f in packages.store().iterdir():
        (folder / f.name).symlink_to(f)
    mp = pytest.MonkeyPatch()
    mp.setattr(packages, "store", lambda: folder)
    built = packages.prepare(
        {"target": pair.target.model}, {"target": WIDE}, _length(pair), report=lambda _m: None
    )
    assert sorted(built) == ["target/5", "target/9"]
    yield pair
    mp.undo()


def test_a_wide_verification_gives_each_row_the_one_position_steps_logits(wide):
    """Greedy spec == AR on the packages at any width rests on this: the target's 9-position
    call (a verification at gamma 8; adaptive gamma's widths go to 33) sums every row as its
    1-position step does, bit for bit (its linear layers through specviz.linear 8 rows at a
    time, its attention as per-query reductions), as its 5-position call does."""
    from specviz.backend import kernels

    if not kernels.ready():
        pytest.skip("specviz's kernels are not built here: packages keep inductor's sums")
    pair = wide
    compiled = pair.with_compile("auto")
    ids = pair.encode_prompt(PROMPT)
    tokens = generate(pair, PROMPT, _greedy(method="ar")).token_ids[: max(WIDE)]
    for width in WIDE:
        seq = ids + tokens[:width]
        with torch.inference_mode():
            alone = compiled.open_cache(compiled.target, (1, width), len(seq) + 1)
            alone.logits(ids)
            steps = torch.stack([alone.logits(seq[: len(ids) + i + 1])[-1] for i in range(width)])
            together = compiled.open_cache(compiled.target, (1, width), len(seq) + 1)
            together.logits(ids)
            call = together.logits(seq, keep=width)
        assert type(alone).__name__ == type(together).__name__ == "StaticLM"
        for lm in (alone, together):
            lm.close()
        differ = [i for i in range(width) if not torch.equal(steps[i], call[i])]
        assert not differ, f"width {width}: rows {differ} differ from the 1-position step's"


def test_greedy_speculative_on_packages_equals_autoregressive_at_gamma_8_and_adaptive(wide):
    pair = wide
    compiled = pair.with_compile("auto")
    want = generate(compiled, PROMPT, _greedy(method="ar")).token_ids
    assert want == generate(pair, PROMPT, _greedy(method="ar")).token_ids
    for s in (_greedy().with_(gamma=8), _greedy().with_(adaptive_gamma=True)):
        s = dataclasses.replace(s, limits=Limits(max_gamma=8))
        run = Run(compiled, PROMPT, s)
        for _ in run:
            pass
        assert run.trace.token_ids == want, s
        assert "ran eager" not in run.trace.models["target"], run.trace.models
        assert type(run.target_lm).__name__ == "StaticLM"
        assert run.trace.stats.target_calls < len(want)  # it did speculate


# --- the target's features (an EAGLE head's input) from its packages --------------------------


def test_a_packaged_cache_keeps_the_eager_targets_features_at_every_row_it_reads(store):
    """Every package returns the model's last hidden state beside its logits: a cache on the
    packages asked for it keeps it at every row a call read (the eager prefill's, a
    one-position step's, a padded verification's without its padding), as the eager
    target computes them, with logits that agree with the eager ones."""
    from specviz.backend import StaticLM
    from specviz.drafters.head import target_features

    pair, _ = store
    model, length = pair.target.model, _length(pair)
    fw = packages.packaged(pair.with_compile("aoti").target, (1, GAMMA + 1), length)
    lm = StaticLM(model, "t", pair.vocab_size, fw, (1, GAMMA + 1), length)
    try:
        assert lm.gives_hidden
        lm.want_hidden = True
        seq = [1, 5, 2, 7]
        want = target_features(model, torch.tensor([seq + [3, 9, 4, 4, 11]]))[0]
        calls = fw.calls
        # (tokens after the call, logit rows kept): the prefill, one step, a 3-position
        # verification, and a 2-position one padded to 3
        for upto, keep in ((4, 1), (5, 1), (8, 3), (9, 1)):
            full = (seq + [3, 9, 4, 4, 11])[:upto]
            start = lm.cached
            logits = lm.logits(full, keep)
            assert lm.hidden_at == start and lm.hidden_all.shape[0] == upto - start
            torch.testing.assert_close(lm.hidden_all, want[start:upto], rtol=1e-5, atol=1e-5)
            assert torch.equal(lm.hidden, lm.hidden_all[-keep:])
            eager = model(input_ids=torch.tensor([full])).logits[0, -keep:, : pair.vocab_size]
            torch.testing.assert_close(logits, eager, rtol=1e-4, atol=1e-4)
        assert fw.calls - calls == 3 and fw.eager_calls == 0
    finally:
        lm.close()


@pytest.mark.variants  # one more package build: CI's second step
def test_a_package_with_features_gives_the_logits_of_one_without_bit_for_bit(
    store, tmp_path, monkeypatch
):
    """The features are an extra output of the same call: the logits of a package that
    returns them equal, bit for bit, those of a package built without them (the same code
    as before they were added), at every row of a prefilled cache."""
    from specviz.backend.aoti import AotiStep, state_of
    from specviz.backend.static_lm import acquire_cache, release_cache

    pair, _ = store
    model, length = pair.target.model, _length(pair)
    with_features = packages.load(model, 1, length)
    monkeypatch.setattr(packages, "store", lambda: tmp_path)
    monkeypatch.setattr(packages, "AotiStep", lambda m, w, n, features=True: AotiStep(m, w, n))
    packages.build(model, 1, length)
    without = packages.load(model, 1, length)
    assert with_features is not None and without is not None
    cache = acquire_cache(model, length)
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([[1, 5, 2, 7, 3]]), past_key_values=cache, use_cache=True)
            for t in (9, 4, 11):
                ids = torch.tensor([[t]])
                pos = int(cache.layers[0].cumulative_length)
                logits, hidden = with_features(ids, *state_of(cache))
                for layer in cache.layers:
                    layer.cumulative_length.fill_(pos)
                plain = without(ids, *state_of(cache))
                assert isinstance(plain, torch.Tensor) and torch.equal(logits, plain)
                assert hidden.shape == (1, model.config.hidden_size)
    finally:
        release_cache(model, length, cache)  # the next StaticLM moves its position to 0


def test_the_eagle_drafter_runs_on_the_packaged_target(store, capsys):
    """A drafter that reads the target's features runs with its target on the packages
    (named or chosen by auto): nothing runs eager, its drafts are both kept and not, and
    greedy speculative output equals the packaged greedy autoregressive output. On
    torch.compile's path, which gives no features, the run still opens its target eager
    (tests/test_head.py)."""
    from specviz.backend import StaticLM
    from specviz.drafters.head import NAME
    from tests.head_check import trained_head

    pair, _ = store
    head = trained_head(pair, 3)
    settings = _greedy(drafter=NAME)
    for backend in ("aoti", "auto"):
        compiled = pair.with_compile(backend)
        compiled.head = head  # type: ignore[attr-defined]
        want = generate(compiled, PROMPT, _greedy(method="ar")).token_ids
        run = Run(compiled, PROMPT, settings)
        for _ in run:
            pass
        assert isinstance(run.target_lm, StaticLM) and run.target_lm.gives_hidden
        assert "ran eager" not in run.trace.models["target"]
        assert "compiled ahead of time" in run.trace.models["target"]
        assert run.trace.token_ids == want and len(want) == TOKENS
        statuses = {d.status for r in run.trace.rounds for d in r.drafted}
        assert {"accepted", "rejected"} <= statuses
    fw = packages.packaged(compiled.target, (1, GAMMA + 1), _length(pair))
    assert fw is not None and fw.eager_calls == 0
    assert "no compiled package" not in capsys.readouterr().err
