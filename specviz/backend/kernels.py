"""specviz's own CPU kernels: ``torch.ops.specviz.linear``, the float32 product of a decode
call's few rows, and ``torch.ops.specviz.int8_linear``, the int8 draft's products
(specviz/backend/csrc/int8_linear.cpp); ``torch.ops.specviz.top_p``, the top-p cut of rows of
probabilities (specviz/backend/csrc/top_p.cpp, called by specviz.sampling.warp).

``linear`` is what a compiled package of the fp32 target calls for its layers at 1 to 8
positions (its step and its verification; specviz.backend.packages), on AVX2 and AVX-512
CPUs: one pass over the weights for up to 5 (AVX-512) or 6 (AVX2) rows, each output summed in
one order whatever rows are beside it, so the step and the verification compute the same
products. Under AVX-512 it prefetches the next tile's weights: on 2 threads of an Intel Xeon
with AVX-512 and AMX the target's products over 5 rows took 20.1 ms against 28.4 for the
reductions inductor generates (17.0 and 18.0 at 1 row).

ATen's kernel for int8 weights (``torch._weight_int8pack_mm``) is written for AVX-512: on an
AVX2 CPU its one-row product runs at a third of the memory's rate, and the int8 draft's step
costs more than the bf16 copy's. ``int8_linear`` streams a layer's weights once for a decode
call's few rows. A float32 input is summed in float32, eight weights at a time sign-extended,
as ATen's kernel does. A 16-bit input (the w8-bf16 and w8-fp16 drafts' activations) is taken
as int16 against each row's largest magnitude, and its products with the int8 weights are
summed exactly in integers: a third of the float loop's instructions per weight. The int8
layers call it on AVX2 and AVX-512 CPUs (specviz.backend.offline.Int8WeightLinear, eager and
packaged). On 2 threads of an Intel Xeon with AVX-512 and AMX the w8 draft's products at 1
row (211 then; 121 since specviz.backend.fusion stacks them) took 5.06 ms against 7.95 for ATen's
kernel and 8.61 for inductor's reductions, read from cache (135 MB: 4.9 ms at the 27.7 GB/s
measured there); read from memory, as a round reads them after the target's call, the int16
form took 8.5 to 9.0 ms against 9.8 to 10.5 for the float loop at 1 row, and 9.5 to 10.2
against 12.0 to 12.1 at 2 rows. On an AMD EPYC with AVX-512 the float loop's packaged step
was the same as ATen's (7.24 against 7.40 ms).

``top_p`` cuts a row to its nucleus in one pass and a sort of a few hundred candidates, where
torch's ``topk`` and masked cut take several passes and, on a CPU fresh from a model call,
fetch each operation's code again: the round's cuts (one per drafted token, one for the
target's rows) took 0.6 ms a draft token and 1.3 ms for the target's 5 rows with torch's
operations inside a generation, on an Intel Xeon with AVX-512 and AMX.

The set-up step (``python -m specviz prepare``) compiles the library once with the system's
C++ compiler against the installed torch, for torch's CPU capability (AVX2, or AVX-512 with
``-mavx512f -mavx512bw``), into the specviz cache, keyed by the source, torch's version and
the compiler's flags; a process loads the library it finds there. Where there is no compiler, or
the build fails, one line on stderr says so and the packages and the int8 draft keep
inductor's and ATen's code: the library is a speed-up, never a requirement. A compiled
package that calls an op names the library in its key (specviz.backend.packages.key).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from specviz.paths import cache_root

SOURCES = tuple(Path(__file__).parent / "csrc" / name for name in ("int8_linear.cpp", "top_p.cpp"))
# The one translation unit the compiler is given, which includes SOURCES: torch's headers,
# most of a build's time, are read once (on 2 cores of an AMD EPYC, 11 s against 23 s for the
# two sources compiled apart).
UNIT = Path(__file__).parent / "csrc" / "kernels.cpp"
# The most rows the ops stream the weights for (csrc's MANY_ROWS); more are a prefill's
# compute-bound product.
STREAMED_ROWS = 8
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared", "-std=c++17", "-w")
# The ISA flags added for each capability that takes the library (csrc's __AVX512F__ path).
ISA_FLAGS = {"AVX2": (), "AVX512": ("-mavx512f", "-mavx512bw")}
_lock = threading.Lock()
_state: dict[str, bool] = {}


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def capability() -> str:
    """The CPU kernels torch dispatches to here ("AVX512", "AVX2", "DEFAULT";
    ATEN_CPU_CAPABILITY): which of the library's forms is built, and a package's key."""
    return str(torch.backends.cpu.get_cpu_capability())


def wanted() -> bool:
    """Whether this CPU takes the library: torch's capability is AVX2 or AVX512 (not a CPU
    without AVX2, nor ATEN_CPU_CAPABILITY=default)."""
    return capability() in ISA_FLAGS


def flags() -> tuple[str, ...]:
    """The compiler's flags for this capability's library."""
    return FLAGS + ISA_FLAGS.get(capability(), ())


def compiler() -> str | None:
    """The C++ compiler: $CXX, else c++ or g++ on the PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++"):
        if name and shutil.which(name):
            return name
    return None


@functools.cache
def digest() -> str:
    """What the library's code depends on: the sources, torch's version and the flags (read
    once per process: package keys and the draft choice's key ask for it)."""
    h = hashlib.sha256()
    for source in (UNIT, *SOURCES):
        h.update(code_of(source.read_text()).encode())
    h.update(f"{torch.__version__}|{' '.join(flags())}".encode())
    return h.hexdigest()[:16]


def code_of(source: str) -> str:
    """A C++ source without its comments and blank lines: what the compiler reads, so that a
    corrected comment leaves the library, and every package that names it, as they are.
    (The sources put no comment marker inside a string literal.)"""
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    lines = (re.sub(r"//.*", "", line).rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line)


def library_path() -> Path:
    return cache_root() / "kernels" / f"specviz_kernels-{digest()}.so"


def command(cxx: str, sources: tuple[Path, ...], out: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [cxx, *flags(), f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-I{p}" for p in include_paths()]
    cmd += [*map(str, sources), "-o", str(out)]
    for p in library_paths():
        cmd += [f"-L{p}", f"-Wl,-rpath,{p}"]
    return cmd + ["-lc10", "-ltorch_cpu", "-ltorch"]


def build(report=_say) -> Path | None:
    """Compile the library where this CPU takes it and it is missing (the file appears
    whole or not at all); its path, or None with one line on stderr when it cannot be."""
    if not wanted():
        return None
    path = library_path()
    if path.exists():
        return path
    cxx = compiler()
    if cxx is None:
        report(
            "specviz: no C++ compiler (c++, g++ or $CXX): the packages and the int8 draft keep "
            "inductor's and ATen's code"
        )
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        done = subprocess.run(command(cxx, (UNIT,), Path(tmp)), capture_output=True, text=True)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0][:160]
            report(
                f"specviz: specviz's kernels did not compile ({first}): inductor's and ATen's "
                "code is used"
            )
            return None
        os.replace(tmp, path)
        _state.clear()  # a process that asked before the build loads it on the next ask
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _register_fake() -> None:
    @torch.library.register_fake("specviz::int8_linear")
    def _(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], w.shape[0]))

    @torch.library.register_fake("specviz::linear")
    def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], w.shape[0]))


def ready() -> bool:
    """Whether specviz's ops (int8_linear, linear) are there to call: this CPU takes them
    and the library is built (loaded on the first ask; a library that will not load is removed with
    one line on stderr, and the set-up step builds it again)."""
    if "ready" in _state:
        return _state["ready"]
    with _lock:
        if "ready" not in _state:
            _state["ready"] = _load()
    return _state["ready"]


def _load() -> bool:
    if not wanted():
        return False
    if hasattr(torch.ops.specviz, "int8_linear"):
        return True
    path = library_path()
    if not path.exists():
        return False
    try:
        torch.ops.load_library(str(path))
        _register_fake()
    except Exception as exc:  # a file on disk: anything may be wrong with it
        _say(
            f"specviz: the kernel library {path.name} is unusable "
            f"({type(exc).__name__}); removed, so the set-up step builds it again"
        )
        path.unlink(missing_ok=True)
        return False
    return True


def tag() -> str:
    """The loaded library's digest, or "" where the op is not used (a package key's part)."""
    return digest() if ready() else ""
