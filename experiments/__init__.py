"""Scripts that reproduce a table or a speed figure the docs cite beside it.

Each is run as ``python -m experiments.<name>`` from the repository root. They are linted and
type-checked with the rest of the code, but not packaged: ``bench/`` is the harness and its commands.
tests/integration/test_experiments.py runs every one on a tiny input; none imports tests/.
"""
