"""The defaults' speed with a busy process beside them: `python -m specviz generate --compare`
on the offline pair, run quiet and beside a `python3 -c` busy loop at nice 0 and at nice 19,
once per thread setting, each in a fresh process. Prints one table row per (setting,
neighbour, repeat): AR and speculative ms/token, the stated speedup, and the threads line
the command printed.

    PYTHONPATH=. .venv/bin/python scripts/contention.py [--repeats 2] \
        [--setting "auto=" --setting "2 fixed=SPECVIZ_THREADS=2" ...]

A setting is NAME=VAR=VALUE[,VAR=VALUE...] (environment for the command; empty for none).
The busy loop starts in a session of its own, as another program on the host would: where
the kernel groups each session's tasks for the scheduler (autogroup), a nice value ranks a
task only within its own session.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

PROMPT = "Explain in three sentences why the sky is blue."
NEIGHBOURS = {"nothing": None, "busy loop (nice 0)": 0, "busy loop (nice 19)": 19}
BUSY = "while True: pass"


def parse_setting(text: str) -> tuple[str, dict[str, str]]:
    name, _, env = text.partition("=")
    pairs = [kv.split("=", 1) for kv in env.split(",") if kv]
    return name, {k: v for k, v in pairs}


def run_once(env: dict[str, str], nice: int | None) -> dict[str, str]:
    """One command, with the neighbour (if any) started a second before and killed after."""
    busy = None
    if nice is not None:
        busy = subprocess.Popen(
            ["nice", "-n", str(nice), "python3", "-c", BUSY], start_new_session=True
        )
        time.sleep(1.0)
    try:
        cmd = [sys.executable, "-m", "specviz", "generate", "--prompt", PROMPT]
        out = subprocess.run(
            [*cmd, "--compare", "--seed", "1"],
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        ).stdout
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    row = {}
    for key, pattern in (
        ("ar", r"AR ms/token\s+([\d.]+)"),
        ("spec", r"speculative ms/token\s+([\d.]+)"),
        ("speedup", r"speedup\s+(\S+)"),
        ("threads", r"threads\s+(.+)"),
        ("busy", r"(the machine was busy.*)"),
    ):
        m = re.search(pattern, out)
        row[key] = m.group(1).strip() if m else "-"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--neighbour", action="append", choices=list(NEIGHBOURS), default=[])
    args = ap.parse_args()
    settings = [parse_setting(s) for s in args.setting] or [("default", {})]
    neighbours = args.neighbour or list(NEIGHBOURS)
    print(
        "| setting | beside the command | AR ms/token | speculative ms/token | speedup | threads |"
    )
    print("|---|---|---|---|---|---|")
    for name, env in settings:
        for who in neighbours:
            for _ in range(args.repeats):
                r = run_once(env, NEIGHBOURS[who])
                print(
                    f"| {name} | {who} | {r['ar']} | {r['spec']} | {r['speedup']} "
                    f"| {r['threads']} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
