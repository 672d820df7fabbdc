"""A hub model's size counts what a load would read: the weights transformers 5 picks
(config.json's ``transformers_weights``, else model.safetensors, else the shards its index
maps, folders included, else pytorch_model.bin, else the shards of its index), config.json
and the tokenizer's files. A decoy beside the real weights does not shrink the figure, and a
repository whose weights cannot be sized (no weight file transformers loads, no index, an
index naming a file the repository lacks, a size unknown) is refused in one line.

The hub is never reached: model_info answers from a listing, and hf_hub_download serves
only the small JSON files the check reads (each read is recorded; any other download fails
the test). The local hub cache is a folder laid out as the hub client lays it out."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import huggingface_hub.constants
import pytest
from huggingface_hub.hf_api import RepoSibling

from specviz import hub

GB = 1_000_000_000
SHARDS = [f"sub/model-0000{i}-of-00002.safetensors" for i in (1, 2)]
TOKENIZER = {"tokenizer.json": 7_000_000, "tokenizer_config.json": 4_000, "merges.txt": 500_000}


def index(*shards: str) -> dict:
    """A safetensors index mapping two tensors to each shard, as save_pretrained writes it."""
    weight_map = {f"layer.{i}.{k}": s for i, s in enumerate(shards) for k in ("a", "b")}
    return {"metadata": {"total_size": 1}, "weight_map": weight_map}


@pytest.fixture()
def stub(monkeypatch, tmp_path):
    """The hub online with the repositories of `stub.repos` (name: size) and the JSON
    bodies of `stub.bodies` ((repo, name): body; config.json is {} unless given)."""
    state = SimpleNamespace(repos={}, bodies={}, read=[])

    def model_info(self, repo_id, *, files_metadata=False, **kwargs):
        assert files_metadata
        siblings = [RepoSibling(n, size=s) for n, s in state.repos[repo_id].items()]
        return SimpleNamespace(id=repo_id, sha="f" * 40, siblings=siblings)

    def hf_hub_download(repo_id, filename, **kwargs):
        assert filename.endswith(".json"), f"{filename} was downloaded"
        assert kwargs.get("revision") == "f" * 40  # the revision the listing describes
        state.read.append(filename)
        body = state.bodies.get((repo_id, filename), {})
        path = tmp_path / repo_id.replace("/", "--") / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body if isinstance(body, str) else json.dumps(body))
        return str(path)

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return state


def refusal(model_id: str) -> str:
    with pytest.raises(ValueError) as err:
        hub.weight_bytes(model_id)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"refused {model_id}: ")
    return line


def test_a_decoy_safetensors_beside_a_large_bin_counts_the_bin(stub) -> None:
    """No model.safetensors and no index: transformers loads pytorch_model.bin, whatever
    other *.safetensors lie beside it."""
    stub.repos["o/decoy"] = {"decoy.safetensors": 1_000, "pytorch_model.bin": 20 * GB}
    assert hub.weight_bytes("o/decoy") == 20 * GB
    limit = hub.Budget(int(9.6 * GB), "40 % of its memory")
    with pytest.raises(ValueError) as err:
        hub.check_fits(["o/decoy"], limit)
    assert str(err.value) == (
        "refused o/decoy: 20.0 GB of weights, above this server's budget of 9.6 GB (40 % of "
        "its memory)"
    )
    # with model.safetensors present, it alone is loaded: the .bin is a second copy
    stub.repos["o/both"] = {"model.safetensors": 3_000, "pytorch_model.bin": 20 * GB}
    assert hub.weight_bytes("o/both") == 3_000


def test_an_index_naming_shards_in_a_folder_counts_them(stub) -> None:
    stub.repos["o/sharded"] = {
        "model.safetensors.index.json": 2_000,
        SHARDS[0]: 4 * GB,
        SHARDS[1]: 3 * GB,
        "original/consolidated.safetensors": 7 * GB,  # named by no index: never loaded
        "config.json": 600,
    }
    stub.bodies["o/sharded", "model.safetensors.index.json"] = index(*SHARDS)
    assert hub.weight_bytes("o/sharded") == 7 * GB + 2_000 + 600
    assert stub.read == ["config.json", "model.safetensors.index.json"]
    # a .bin index, where there is no safetensors of either kind
    stub.repos["o/bin-sharded"] = {
        "pytorch_model.bin.index.json": 1_000,
        "pytorch_model-00001-of-00001.bin": 5 * GB,
        "stray.safetensors": 10,
    }
    stub.bodies["o/bin-sharded", "pytorch_model.bin.index.json"] = index(
        "pytorch_model-00001-of-00001.bin"
    )
    assert hub.weight_bytes("o/bin-sharded") == 5 * GB + 1_000


def test_shards_without_their_index_are_refused(stub) -> None:
    stub.repos["o/no-index"] = {SHARDS[0]: 4 * GB, "model-00002-of-00002.safetensors": 3 * GB}
    assert "it has no weight file transformers loads" in refusal("o/no-index")
    assert not stub.read


def test_an_index_naming_a_shard_the_repository_lacks_is_refused(stub) -> None:
    stub.repos["o/lacking"] = {"model.safetensors.index.json": 2_000, SHARDS[0]: 4 * GB}
    stub.bodies["o/lacking", "model.safetensors.index.json"] = index(*SHARDS)
    line = refusal("o/lacking")
    assert line == (
        f"refused o/lacking: its model.safetensors.index.json names '{SHARDS[1]}', which is "
        "not in the repository"
    )


@pytest.mark.parametrize(
    ("body", "size", "words"),
    [
        ("{not json", 100, "its model.safetensors.index.json could not be read"),
        ({"metadata": {}}, 100, "maps no weights (no weight_map)"),
        ({"weight_map": {"a": ["x"]}}, 100, "maps a weight to ['x'], not a file name"),
        (None, hub.JSON_MAX_BYTES + 1, "more than the 32.0 MB this server reads"),
        (None, None, "the size of its model.safetensors.index.json is not known"),
    ],
)
def test_an_index_that_cannot_be_read_is_refused(stub, body, size, words) -> None:
    stub.repos["o/bad-index"] = {"model.safetensors.index.json": size, SHARDS[0]: GB}
    if body is not None:
        stub.bodies["o/bad-index", "model.safetensors.index.json"] = body
    assert words in refusal("o/bad-index")
    if body is None:
        assert not stub.read  # too large or of unknown size: not downloaded


def test_a_shard_of_unknown_size_is_refused(stub) -> None:
    stub.repos["o/unsized"] = {"model.safetensors.index.json": 2_000, SHARDS[0]: None}
    stub.bodies["o/unsized", "model.safetensors.index.json"] = index(SHARDS[0])
    assert refusal("o/unsized") == f"refused o/unsized: the size of its {SHARDS[0]} is not known"


def test_the_tokenizer_and_config_files_are_counted(stub) -> None:
    stub.repos["o/tok"] = {
        "model.safetensors": 1_000,
        "config.json": 600,
        "README.md": 10_000,  # never read by a load
        "sub/tokenizer.json": 9 * GB,  # nor is a folder's tokenizer
        **TOKENIZER,
    }
    assert hub.weight_bytes("o/tok") == 1_000 + 600 + sum(TOKENIZER.values())
    stub.repos["o/huge-tok"] = {"model.safetensors": 1_000, "tokenizer.json": 30 * GB}
    assert hub.weight_bytes("o/huge-tok") == 30 * GB + 1_000


def test_the_file_config_json_names_is_the_one_counted(stub) -> None:
    """config.json's transformers_weights comes before every default name."""
    stub.repos["o/named"] = {
        "model.safetensors": 1_000,
        "big.safetensors": 12 * GB,
        "config.json": 600,
    }
    stub.bodies["o/named", "config.json"] = {"transformers_weights": "big.safetensors"}
    assert hub.weight_bytes("o/named") == 12 * GB + 600
    stub.bodies["o/named", "config.json"] = {"transformers_weights": "gone.safetensors"}
    assert "names 'gone.safetensors', not in the repository" in refusal("o/named")
    stub.bodies["o/named", "config.json"] = {"transformers_weights": "w.pt"}
    assert "names weights transformers refuses: 'w.pt'" in refusal("o/named")
    stub.bodies["o/named", "config.json"] = "[1, 2]"
    assert "its config.json could not be read: not a JSON object" in refusal("o/named")


def test_the_cache_is_sized_the_same_way_offline(tmp_path, monkeypatch) -> None:
    """HF_HUB_OFFLINE=1: the cached snapshot's files, folders included, are listed, and
    its index is read from the snapshot."""
    from tests.test_hub import REVISION

    repo = tmp_path / "models--owner--sharded"
    snapshot, blobs = repo / "snapshots" / REVISION, repo / "blobs"
    files = {
        "config.json": b"{}",
        "model.safetensors.index.json": json.dumps(index(*SHARDS)).encode(),
        SHARDS[0]: b"x" * 3_000,
        SHARDS[1]: b"x" * 2_000,
        "decoy.safetensors": b"x" * 10,
        "tokenizer.json": b"x" * 70,
    }
    for n, (name, data) in enumerate(files.items()):
        (blobs / str(n)).parent.mkdir(parents=True, exist_ok=True)
        (blobs / str(n)).write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (name.count("/") + 2)) / "blobs" / str(n))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda *a, **k: pytest.fail("asked"))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("got"))
    expected = 2 + len(files["model.safetensors.index.json"]) + 3_000 + 2_000 + 70
    assert hub.weight_bytes("owner/sharded") == expected
    (snapshot / SHARDS[1]).unlink()  # a shard not cached: transformers could not load it
    assert "names 'sub/model-00002-of-00002.safetensors', which is not in" in refusal(
        "owner/sharded"
    )
