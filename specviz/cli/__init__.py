"""The command line, `python -m specviz generate|prepare|costs|bench|check|sweep|calibration`.

specviz.cli.main builds the parser and dispatches; specviz.cli.args holds what several
commands share (argument groups, settings and the pair from parsed arguments); each other
module is one command or a group of them. Bad input prints one line to stderr and exits
with code 2, before any model loads where possible, and without a traceback. With --json,
stdout carries JSON and nothing else.
"""
