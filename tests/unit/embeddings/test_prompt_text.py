"""The embed-text rule on hand-made texts. ``CharPieces`` counts 4 characters a piece, so in
"aaa bbb ccc ..." every piece is one word and its trailing space."""

from __future__ import annotations

import numpy as np
import pytest

from embeddings.prompt_text import (
    CharPieces,
    EmbedText,
    EmbedTextError,
    chunks,
    embedding_texts,
    head_tail,
    last_user_first,
    pool,
)

WORDS = "aaa bbb ccc ddd eee fff ggg hhh iii jjj kkk lll"  # 12 pieces
CHAT = [("system", "sys prompt"), ("user", "q1"), ("assistant", "a1"), ("user", "q2")]


def texts(prompt, strategy: str, max_tokens: int | None = 8) -> list[str]:
    return embedding_texts(prompt, EmbedText(strategy, max_tokens), CharPieces())


def test_head_keeps_the_first_pieces() -> None:
    assert texts(WORDS, "head") == ["aaa bbb ccc ddd eee fff ggg hhh "]


def test_head_tail_keeps_a_quarter_of_head_and_the_rest_from_the_tail() -> None:
    assert texts(WORDS, "head-tail") == ["aaa bbb \nggg hhh iii jjj kkk lll"]


def test_a_text_within_the_budget_is_embedded_as_it_is_by_every_strategy() -> None:
    for strategy in ("head", "head-tail", "last-user-first", "chunk-mean"):
        assert texts(WORDS, strategy, 12) == [WORDS]


def test_plain_prompt_under_last_user_first_is_head_tail() -> None:
    assert texts(WORDS, "last-user-first") == texts(WORDS, "head-tail")


def test_chunk_mean_cuts_consecutive_chunks_of_the_budget() -> None:
    assert texts(WORDS, "chunk-mean") == ["aaa bbb ccc ddd eee fff ggg hhh ", "iii jjj kkk lll"]


def test_chunks_end_before_a_word_and_are_capped_evenly() -> None:
    text = "abcdefgh ij"  # pieces "abcd" "efgh" " ij": a cut after piece 1 would split a word
    assert chunks(text, CharPieces().spans(text), 2) == ["abcdefgh", " ij"]
    many = " ".join(f"w{i:02d}" for i in range(40))  # 40 pieces, budget 2: 20 chunks, 16 kept
    kept = chunks(many, CharPieces().spans(many), 2)
    assert len(kept) == 16 and kept[0] == "w00 w01 " and kept[-1] == "w38 w39"


def test_head_tail_tail_starts_at_a_word() -> None:
    text = "aaaa bbbbbbb cc"  # pieces "aaaa" " bbb" "bbbb" " cc"; budget 2: head 0 pieces, tail from piece 2
    assert head_tail(text, CharPieces().spans(text), 2) == " cc"


def test_last_user_first_orders_turns_and_drops_the_system_prompt() -> None:
    assert last_user_first(CHAT) == ["q2", "a1", "q1"]
    assert texts(CHAT, "last-user-first", None) == ["q2\na1\nq1"]
    assert texts(CHAT, "head", None) == ["sys prompt\nq1\na1\nq2"]
    assert texts(CHAT, "head-tail", None) == ["sys prompt\nq1\na1\nq2"]


def test_a_system_prompt_alone_is_embedded() -> None:
    assert texts([("system", "only this")], "last-user-first", None) == ["only this"]
    assert texts([("system", "s"), ("user", "  ")], "last-user-first", None) == ["s"]


def test_earlier_turns_fill_the_room_the_last_user_turn_leaves() -> None:
    chat = [("user", "aaa bbb ccc ddd eee fff"), ("assistant", "xxx yyy zzz www"), ("user", "uuu vvv")]
    assert texts(chat, "last-user-first") == ["uuu vvv\nxxx yyy zzz www\naaa bbb "]


def test_the_budget_is_clipped_to_what_the_embedder_reads() -> None:
    assert EmbedText("head", 100).budget(CharPieces(limit=10)) == 10
    assert EmbedText("head").budget(CharPieces(limit=10)) == 10
    assert EmbedText("head").budget(CharPieces()) == 256
    assert EmbedText("head", 16).budget(CharPieces()) == 16


def test_pool_is_the_normalised_mean() -> None:
    rows = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    np.testing.assert_allclose(pool(rows), [2**-0.5, 2**-0.5], rtol=1e-6)
    np.testing.assert_array_equal(pool(rows[:1]), [1.0, 0.0])


def test_config_round_trips_and_rejects_bad_values() -> None:
    rule = EmbedText.from_config({"strategy": "chunk-mean", "max_tokens": 128})
    assert rule == EmbedText("chunk-mean", 128) and EmbedText.from_config(rule.config()) == rule
    assert EmbedText.from_config(None) == EmbedText("last-user-first", None)
    assert (
        EmbedText.parse("head:256") == EmbedText("head", 256)
        and EmbedText.parse("head-tail").max_tokens is None
    )
    for bad in ({"strategy": "tail"}, {"max_tokens": 4}, {"max_tokens": 1.5}, {"max_tokens": True}, {"x": 1}):
        with pytest.raises(EmbedTextError):
            EmbedText.from_config(bad)
    with pytest.raises(EmbedTextError):
        EmbedText.parse("head:many")


def _random_turns(rng: np.random.Generator) -> list[tuple[str, str]]:
    """Chat turns of random printable ASCII words, punctuation and the odd blank or space-only turn."""
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-#")
    turns = []
    for _ in range(int(rng.integers(1, 5))):
        words = [
            "".join(rng.choice(alphabet, size=int(rng.integers(1, 12))))
            for _ in range(int(rng.integers(0, 40)))
        ]
        role = str(rng.choice(["system", "user", "assistant"]))
        turns.append((role, " ".join(words) if words else "  "))
    return turns


@pytest.mark.parametrize("tokenizer_name", ["minilm", "chars"])
def test_texts_that_fit_skip_the_tokenizer_and_get_what_tokenizing_gives(
    tokenizer_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fits_untokenized`` (printable ASCII within the budget in characters) gives, for every strategy
    and budget, the texts the tokenizer-driven cut gives; 400 random chats, the real MiniLM tokenizer."""
    import embeddings.prompt_text as prompt_text
    from embeddings.minilm import load_wordpieces

    tokenizer = load_wordpieces() if tokenizer_name == "minilm" else CharPieces()
    rng = np.random.default_rng(13)
    fast_taken = 0
    for _ in range(400):
        turns = _random_turns(rng)
        rule = EmbedText(
            str(rng.choice(["head", "head-tail", "last-user-first", "chunk-mean"])), int(rng.integers(8, 300))
        )
        fast = embedding_texts(turns, rule, tokenizer)
        fits = prompt_text.fits_untokenized(last_user_first(turns), rule.budget(tokenizer))
        with monkeypatch.context() as patched:
            patched.setattr(prompt_text, "fits_untokenized", lambda texts, budget: False)
            slow = embedding_texts(turns, rule, tokenizer)
        assert fast == slow, (turns, rule)
        fast_taken += fits
    assert fast_taken > 50  # the property was exercised on the fast path, not only on the cut


def test_non_ascii_or_invisible_texts_are_tokenized() -> None:
    from embeddings.prompt_text import fits_untokenized

    assert fits_untokenized(["What is 2+2?"], 12)
    assert not fits_untokenized(["What is 2+2?"], 11)  # more characters than the budget
    assert not fits_untokenized(["café"], 100)  # not ASCII
    assert not fits_untokenized(["ok", "\x01\x02"], 100)  # a text with no visible character may have no piece
