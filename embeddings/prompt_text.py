"""What the embedder reads: the rule that turns a prompt (text or chat turns) into the text(s) embedded.

An embedder reads a bounded number of word pieces (MiniLM: 256 with its two special tokens, so 254 of
text) and drops the rest, so prompts that share a long prefix (a few-shot template, a system prompt, a
chat history) would get one vector. A rule ``EmbedText(strategy, max_tokens)`` chooses what fits in a
budget of ``max_tokens`` word pieces of the embedder's own tokenizer (clipped to what it reads; ``None``
= all it reads). Embedders without a tokenizer (``hashing``, ``clip``) count ``CHARS_PER_PIECE``
characters as one piece, so the budget is ``4 * max_tokens`` characters (``DEFAULT_CHAR_PIECES`` pieces
when ``max_tokens`` is ``None``).

Strategies (``messages`` are (role, text) turns; a plain prompt is one user turn):

- ``head``: the turns in order, joined by newlines; the first ``budget`` pieces (the rule before this
  module existed: what MiniLM itself keeps).
- ``head-tail``: the turns in order; a text longer than the budget keeps its first ``budget // 4`` pieces
  and its last ``budget - budget // 4`` (the tail starts at a word), joined by a newline.
- ``last-user-first`` (the default): the last user turn first, fitted by ``head-tail``; then the other
  non-system turns, most recent first, each cut to the room left, until none is left. System turns are
  embedded only when the request has no other text: a system prompt is set per application and is the
  same for all its requests, so it carries nothing that separates them (use one router per application
  to route applications apart). For a plain prompt this is ``head-tail``.
- ``chunk-mean``: the turns ordered as for ``last-user-first``, cut into chunks of ``budget`` pieces (at
  most ``MAX_CHUNKS``, evenly spaced, first and last kept); the vector is the normalised mean of the
  chunks' unit embeddings (``pool``).

The gateway and the bench both call ``embedding_texts`` then ``pool``, so they embed the same text.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

STRATEGIES = ("head", "head-tail", "last-user-first", "chunk-mean")
DEFAULT_STRATEGY = "last-user-first"
MIN_TOKENS = 8
MAX_TOKENS = 8192
MAX_CHUNKS = 16
CHARS_PER_PIECE = 4
DEFAULT_CHAR_PIECES = 256
HEAD_SHARE = 4  # head-tail keeps budget // HEAD_SHARE pieces of the head, the rest from the tail

Span = tuple[int, int]
Turn = tuple[str, str]
Prompt = str | Sequence[Turn]


class EmbedTextError(ValueError):
    """An embed-text rule that names an unknown strategy or an out-of-range budget."""


class PieceTokenizer(Protocol):
    """Character spans of a text's word pieces (no special tokens); ``limit``: the most pieces the
    embedder reads (None: no limit)."""

    limit: int | None

    def spans(self, text: str) -> list[Span]: ...


class CharPieces:
    """The fallback for embedders without a tokenizer: every ``CHARS_PER_PIECE`` characters are a piece."""

    limit: int | None = None

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit

    def spans(self, text: str) -> list[Span]:
        n = len(text)
        return [(i, min(i + CHARS_PER_PIECE, n)) for i in range(0, n, CHARS_PER_PIECE)]


@dataclass(frozen=True)
class EmbedText:
    """A router's (or a bench run's) embed-text rule; see the module docstring."""

    strategy: str = DEFAULT_STRATEGY
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise EmbedTextError(
                f"unknown embed-text strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}"
            )
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or not MIN_TOKENS <= self.max_tokens <= MAX_TOKENS
        ):
            raise EmbedTextError(
                f"embed-text max_tokens must be an integer in [{MIN_TOKENS}, {MAX_TOKENS}] or null, "
                f"got {self.max_tokens!r}"
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> EmbedText:
        """``{"strategy": ..., "max_tokens": ...}`` (both optional); None or {} is the default rule."""
        config = dict(config or {})
        unknown = sorted(set(config) - {"strategy", "max_tokens"})
        if unknown:
            raise EmbedTextError(f"unknown embed-text keys {unknown}; known: strategy, max_tokens")
        return cls(config.get("strategy", DEFAULT_STRATEGY), config.get("max_tokens"))

    @classmethod
    def parse(cls, text: str) -> EmbedText:
        """``STRATEGY`` or ``STRATEGY:MAX_TOKENS`` (the bench's ``--embed-text``)."""
        strategy, _, tokens = text.partition(":")
        try:
            return cls(strategy, int(tokens) if tokens else None)
        except ValueError as exc:
            raise EmbedTextError(f"--embed-text wants STRATEGY[:MAX_TOKENS], got {text!r}: {exc}") from exc

    def config(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "max_tokens": self.max_tokens}

    def budget(self, tokenizer: PieceTokenizer) -> int:
        """Pieces available: ``max_tokens`` (or the embedder's limit, or ``DEFAULT_CHAR_PIECES``), never
        more than the embedder reads."""
        wanted = self.max_tokens or tokenizer.limit or DEFAULT_CHAR_PIECES
        return min(wanted, tokenizer.limit) if tokenizer.limit else wanted


def embedding_texts(prompt: Prompt, rule: EmbedText, tokenizer: PieceTokenizer) -> list[str]:
    """The text(s) to embed for ``prompt`` under ``rule`` (several only for ``chunk-mean``)."""
    turns: list[Turn] = [("user", prompt)] if isinstance(prompt, str) else list(prompt)
    budget = rule.budget(tokenizer)
    if rule.strategy in ("head", "head-tail"):
        text = joined_in_order(turns)
        if fits_untokenized([text], budget):
            return [text]
        cut = head if rule.strategy == "head" else head_tail
        return [cut(text, tokenizer.spans(text), budget)]
    ordered = last_user_first(turns)
    if fits_untokenized(ordered, budget):  # nothing is cut: every rule keeps the texts whole
        return ["\n".join(ordered)]
    if rule.strategy == "chunk-mean":
        text = "\n".join(ordered)
        return chunks(text, tokenizer.spans(text), budget)
    return [fill(ordered, tokenizer, budget)]


def fits_untokenized(texts: Sequence[str], budget: int) -> bool:
    """Whether ``texts`` certainly fit in ``budget`` pieces, each with at least one, without tokenizing
    them (the gateway embeds every request's prompt under its rule, and tokenizing cost more than the
    rest of a cached embedding's lookup): printable ASCII text has no more pieces than characters (a
    WordPiece or character piece covers at least one character, and ASCII lowercases one to one), and a
    text with a visible ASCII character has a piece."""
    if sum(len(text) for text in texts) > budget:
        return False
    return all(text.isascii() and any("!" <= c <= "~" for c in text) for text in texts)


def pool(vectors: np.ndarray) -> np.ndarray:
    """One unit vector from a prompt's (n, d) unit rows: their mean, normalised (a single row as is)."""
    rows = np.asarray(vectors, dtype=np.float32)
    if len(rows) == 1:
        return rows[0]
    mean = rows.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else mean


def joined_in_order(turns: Sequence[Turn]) -> str:
    """Every turn's text in the order sent, joined by newlines (system turns included)."""
    return "\n".join(text for _, text in turns)


def last_user_first(turns: Sequence[Turn]) -> list[str]:
    """The non-empty texts to embed, in order: the last user turn, then the other non-system turns most
    recent first; the system turns (in order) only when there is nothing else."""
    texts = [(role, text) for role, text in turns if text.strip()]
    others = [(i, text) for i, (role, text) in enumerate(texts) if role != "system"]
    if not others:
        return [text for _, text in texts]
    users = [i for i, (role, _) in enumerate(texts) if role == "user"]
    first = users[-1] if users else others[-1][0]
    return [texts[first][1]] + [text for i, text in reversed(others) if i != first]


def fill(texts: Sequence[str], tokenizer: PieceTokenizer, budget: int) -> str:
    """The first text fitted by ``head_tail``; each next one cut to the room left (its head)."""
    parts: list[str] = []
    room = budget
    for index, text in enumerate(texts):
        if room <= 0:
            break
        spans = tokenizer.spans(text)
        if not spans:
            continue
        parts.append(head_tail(text, spans, room) if index == 0 else head(text, spans, room))
        room -= min(len(spans), room)
    return "\n".join(parts)


def head(text: str, spans: Sequence[Span], budget: int) -> str:
    """The text up to the end of its ``budget``-th piece."""
    return text if len(spans) <= budget else text[: spans[budget - 1][1]]


def head_tail(text: str, spans: Sequence[Span], budget: int) -> str:
    """A text within budget as is; else its first ``budget // HEAD_SHARE`` pieces, a newline, and its
    last pieces from a word start (at most ``budget`` pieces in all)."""
    if len(spans) <= budget:
        return text
    n_head = budget // HEAD_SHARE
    start = word_start(text, spans, len(spans) - (budget - n_head))
    tail = text[spans[start][0] :] if start < len(spans) else ""
    return "\n".join(part for part in (head(text, spans, n_head) if n_head else "", tail) if part)


def chunks(text: str, spans: Sequence[Span], budget: int) -> list[str]:
    """The text cut into consecutive chunks of at most ``budget`` pieces, each cut before a word (inside
    one only when a single word is longer than the budget); at most ``MAX_CHUNKS`` of them, evenly
    spaced, the first and the last kept."""
    if len(spans) <= budget:
        return [text]
    bounds = [0]
    while bounds[-1] + budget < len(spans):
        cut = bounds[-1] + budget
        while cut > bounds[-1] and continues_word(text, spans, cut):
            cut -= 1
        bounds.append(cut if cut > bounds[-1] else bounds[-1] + budget)
    bounds.append(len(spans))
    pieces = [text[spans[a][0] : spans[b - 1][1]] for a, b in itertools.pairwise(bounds)]
    if len(pieces) > MAX_CHUNKS:
        keep = np.linspace(0, len(pieces) - 1, MAX_CHUNKS).round().astype(int)
        pieces = [pieces[i] for i in keep]
    return pieces


def word_start(text: str, spans: Sequence[Span], index: int) -> int:
    """The first piece at or after ``index`` that does not continue a word, so that a tail re-tokenizes
    to the same pieces."""
    while continues_word(text, spans, index):
        index += 1
    return index


def continues_word(text: str, spans: Sequence[Span], index: int) -> bool:
    """Whether piece ``index`` continues the word of the piece before it (a WordPiece ``##`` piece, or a
    character run cut between two letters)."""
    if not 0 < index < len(spans) or spans[index][0] != spans[index - 1][1]:
        return False
    at = spans[index][0]
    return text[at - 1].isalnum() and text[at].isalnum()
