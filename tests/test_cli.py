"""The command line: JSON traces on stdout, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specviz.cli.main import main
from tests.conftest import set_up_env

REQUIRED = {"method", "text", "token_ids", "settings", "rounds", "stats"}
ROUND_KEYS = {"index", "drafted", "added", "draft_ms", "verify_ms"}
DRAFT_KEYS = {"id", "text", "p", "q", "accept_prob", "u", "status", "overlap", "top"}
STATS_KEYS = {
    "new_tokens",
    "rounds",
    "target_calls",
    "drafted",
    "accepted",
    "acceptance_rate",
    "alpha",
    "wall_s",
    "ms_per_token",
}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--prompt", "  "], "prompt is empty"),
        (["--prompt", "hi", "--gamma", "0"], "gamma must be in 1..32"),
        (["--prompt", "hi", "--gamma", "33"], "gamma must be in 1..32"),
        (["--prompt", "hi", "--temperature", "-1"], "temperature must be a number >= 0"),
        (["--prompt", "hi", "--temperature", "1e-40"], "temperature must be 0 (greedy) or at"),
        (["--prompt", "hi", "--draft-temperature", "1e-40"], "draft_temperature must be 0"),
        (["--prompt", "hi", "--top-p", "0"], "top_p must be in (0, 1]"),
        (["--prompt", "hi", "--top-p", "1.01"], "top_p must be in (0, 1]"),
        (["--prompt", "hi", "--top-k", "-2"], "top_k must be in >= 0"),
        (["--prompt", "hi", "--max-new-tokens", "0"], "max_new_tokens must be in 1..2048"),
        (["--prompt", "hi", "--max-new-tokens", "5000"], "max_new_tokens must be in 1..2048"),
        (["--prompt", "hi", "--pair", "gpt-5"], "unknown pair 'gpt-5'"),
        (["--prompt", "hi", "--draft", "../../etc", "--target", "a/b"], "refused model id"),
        (["--prompt", "hi", "--draft", "https://x.y/m", "--target", "a/b"], "refused model id"),
        (["--prompt", "hi", "--draft", "a/b"], "needs both a draft id and a target id"),
        (["--prompt", "hi", "--gamma", "two"], "invalid int value"),
        (["--prompt", "hi", "--verification", "exact"], "argument --verification: invalid"),
        (["--prompt", "hi", "--top-n", "0"], "top_n must be in 1..100, got 0"),
        (["--prompt", "hi", "--seed", "-1"], "seed must be in 0..9223372036854775807"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, message):
    assert main(["generate", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_prompt_longer_than_the_context(capsys, offline_pair):
    assert main(["generate", "--prompt", "word " * 9000]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "prompt is" in err and err.count("\n") == 1


def test_json_samples_one_object_per_line(capsys, offline_pair):
    argv = [
        "generate",
        "--prompt",
        "Name a colour.",
        "--max-new-tokens",
        "6",
        "--json",
        "--samples",
        "3",
        "--seed",
        "5",
        "--temperature",
        "0.8",
        "--top-p",
        "0.95",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    traces = [json.loads(line) for line in lines]
    assert [t["settings"]["seed"] for t in traces] == [5, 6, 7]
    for t in traces:
        assert REQUIRED <= set(t) and STATS_KEYS <= set(t["stats"]) and t["method"] == "spec"
        assert len(t["token_ids"]) == t["stats"]["new_tokens"] <= 6
        for r in t["rounds"]:
            assert ROUND_KEYS <= set(r)
            assert all(DRAFT_KEYS <= set(d) for d in r["drafted"])


def test_terminal_output_marks_statuses(capsys, offline_pair):
    argv = [
        "generate",
        "--prompt",
        "Name a colour.",
        "--max-new-tokens",
        "12",
        "--draft-temperature",
        "3.0",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "acceptance rate" in out and "ms per token" in out and "[-" in out


def test_alpha_not_measured_is_said_so(capsys):
    from specviz.cli.generate import print_comparison, print_trace
    from specviz.config import Settings
    from specviz.engine import generate
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=8, sharpness=1.0)
    s = Settings(gamma=3, max_new_tokens=12, trace_level="minimal")
    spec, ar = generate(pair, "1 2", s), generate(pair, "1 2", s.with_(method="ar"))
    print_trace(spec, color=False)
    print_comparison(ar, spec)
    out = capsys.readouterr().out
    alpha_line = next(line for line in out.splitlines() if line.startswith("alpha"))
    assert "not measured" in alpha_line and "0.000" not in alpha_line
    assert "expected (Leviathan)   needs alpha" in out


def test_generate_with_exact_match_verification(capsys, monkeypatch):
    from tests.tiny import close_pair

    pair = close_pair()
    monkeypatch.setattr(
        "specviz.cli.generate.load_pair_from_args", lambda args, compiled=True: pair
    )
    argv = ["generate", "--prompt", "1 2 3", "--raw", "--max-new-tokens", "24"]
    argv += ["--temperature", "1.0", "--verification", "exact-match"]
    assert main([*argv, "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["settings"]["verification"] == "exact-match"
    tested = [d for r in t["rounds"] for d in r["drafted"] if d["status"] != "discarded"]
    assert tested and all(d["u"] is None and d["target_sample"] is not None for d in tested)
    assert all((d["target_sample"] == d["id"]) == (d["status"] == "accepted") for d in tested)
    assert main([*argv, "--compare"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split("  ")[0] for line in lines]
    i = names.index("acceptance rate")
    assert lines[i - 1].split()[1] == "exact-match" and names[i + 1 : i + 3] == ["sum p q", "alpha"]
    assert any(line.startswith("expected (Leviathan)") and "at sum p q" in line for line in lines)


def test_the_module_runs_offline_without_a_traceback():
    env = set_up_env()
    cmd = [
        sys.executable,
        "-m",
        "specviz",
        "generate",
        "--prompt",
        "Say hi.",
        "--max-new-tokens",
        "4",
        "--json",
        "--greedy",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == 1 and json.loads(done.stdout)["method"] == "spec"
    bad = subprocess.run(cmd[:4] + [""], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stdout == ""
