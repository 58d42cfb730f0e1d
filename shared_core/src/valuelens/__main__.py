"""``python -m valuelens``: the command line (:mod:`valuelens.cli`)."""

from valuelens.cli import app

app()
