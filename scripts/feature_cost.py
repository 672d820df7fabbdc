"""What returning the target's features costs its packaged autoregressive step: the offline
target's 1-position package as the set-up step builds it (logits and the last hidden state)
against one built without the hidden state, both loaded in this process and called
alternately on the same prefilled cache of the default run's length, REPS calls each
(specviz.costs.interleaved_calls), at each thread count given. Prints the median ms of
each and their ratio, with the CPU.

    PYTHONPATH=. .venv/bin/python scripts/feature_cost.py [REPS] [THREADS ...]

Needs the offline pair's packages (python -m specviz prepare builds them); builds the
package without features in a temporary store (about a minute on 2 cores).
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from specviz.backend import packages
from specviz.backend.aoti import AotiStep, state_of
from specviz.backend.static_lm import acquire_cache, release_cache
from specviz.costs import interleaved_calls
from specviz.models import OFFLINE_TARGET, _get_model, _get_tokenizer, default_cache_len
from specviz.threads import cpu_info

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
THREADS = [int(t) for t in sys.argv[2:]] or [torch.get_num_threads()]
dev = torch.device("cpu")
model = _get_model(OFFLINE_TARGET, dev, torch.float32).model
length = default_cache_len(_get_tokenizer(OFFLINE_TARGET))
with_features = packages.load(model, 1, length)
assert with_features is not None, "no package: run python -m specviz prepare"
real_store, real_step = packages.store, packages.AotiStep
with tempfile.TemporaryDirectory() as tmp:
    packages.store = lambda: Path(tmp)
    packages.AotiStep = lambda m, w, n, features=True: AotiStep(m, w, n)
    packages.build(model, 1, length)
    without = packages.load(model, 1, length)
    packages.store, packages.AotiStep = real_store, real_step
assert without is not None
cache = acquire_cache(model, length)
with torch.inference_mode():
    prompt = torch.arange(100, 164)[None]  # 64 positions of context
    model(input_ids=prompt, past_key_values=cache, use_cache=True)
    pos = int(cache.layers[0].cumulative_length)
    ids = torch.tensor([[42]])

    def timed(fn):
        def call() -> float:
            for layer in cache.layers:
                layer.cumulative_length.fill_(pos)
            start = time.perf_counter()
            fn(ids, *state_of(cache))
            return (time.perf_counter() - start) * 1e3

        return call

    print(f"CPU: {cpu_info()[0]}; torch {torch.__version__}; cache {length}, 64 positions held")
    for threads in THREADS:
        torch.set_num_threads(threads)
        ms = interleaved_calls({"features": timed(with_features), "plain": timed(without)}, REPS)
        f, p = statistics.median(ms["features"]), statistics.median(ms["plain"])
        print(
            f"{threads} thread(s): with features {f:.2f} ms, without {p:.2f} ms, "
            f"ratio {f / p:.3f} ({REPS} calls each, interleaved)"
        )
release_cache(model, length, cache)
