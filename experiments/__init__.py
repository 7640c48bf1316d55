"""One-off experiment scripts that reproduce a table or a speed figure in the docs.

Each is run as ``python -m experiments.<name>`` from the repository root. They are linted and
type-checked with the rest of the code, but not packaged: ``bench/`` is the harness and its commands.
"""
