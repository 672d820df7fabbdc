"""A pair report over a prompt set: where a draft loses, category by category and position
by position (`python -m specviz report`, the app's Prompt set tab).

One module per concern; each imports only the ones above it:

- prompts: the built-in set and JSON lines files, checked line by line;
- records: one finished prompt (its traces), one line of runs.jsonl;
- stats: the report's figures as pure functions of the records;
- figures: Plotly figures from report.json's content;
- html: the self-contained report.html;
- run: running a plan into a directory (resume, shards, merge).

Nothing here loads a model at import.
"""
