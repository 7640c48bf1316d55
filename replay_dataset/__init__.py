"""The replay dataset format (``models.json`` + ``rows.jsonl``, docs/datasets.md): its one reader and
one writer (``replay_dataset.files``).

A package of its own because two sides read the format: the offline benchmark (``bench/``) and the
gateway's replay backends (``app/``), and ``bench`` never imports ``app``. It does file I/O, so it is not
part of the pure ``routers/``; it imports only ``routers.prices`` (what a call costs).
"""
