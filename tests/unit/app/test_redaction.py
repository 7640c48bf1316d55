"""app/redaction.py by hand: configured secrets in every form, credential shapes, and what is kept."""

from __future__ import annotations

from app.redaction import PLACEHOLDER, redact, redacted_excerpt

R = PLACEHOLDER


def test_configured_secrets_are_replaced_wherever_and_however_they_appear() -> None:
    key = "zq9-short!key"  # not shaped like a token: only the configured list can catch it
    assert redact(f"key={key}.", [key]) == f"key={R}."
    assert redact(f"seen {key} twice: {key}", [key]) == f"seen {R} twice: {R}"
    assert redact('{"k": "ab\\"cd"}', ['ab"cd']) == f'{{"k": "{R}"}}'  # its JSON-escaped form
    assert redact("q=zq9-short%21key", [key]) == f"q={R}"  # its URL-encoded form
    # the longer of two overlapping secrets first: no half of it is left
    assert redact("abcdefgh", ["abcd", "abcdefgh"]) == R
    assert redact("the cat sat", ["cat"]) == "the cat sat"  # under 4 characters: not replaced
    assert redact("nothing here", []) == "nothing here"


def test_credential_shapes_are_replaced_without_configuration() -> None:
    assert redact("Authorization: Bearer abc.DEF-123_x") == f"Authorization: Bearer {R}"
    assert redact("basic dXNlcjpwYXNz") == f"basic {R}"
    assert redact('{"api_key": "hunter2", "model": "m"}') == f'{{"api_key": "{R}", "model": "m"}}'
    assert redact("token=abc&x=1") == f"token={R}&x=1"
    assert redact("x-api-key: k1") == f"x-api-key: {R}"
    assert redact("http://user:pw@host/v1") == f"http://{R}@host/v1"
    assert redact("use sk-proj-AbCdEf012345 now") == f"use {R} now"
    assert redact("bg_" + "x" * 43) == R  # a tenant key
    assert redact("sha " + "0123456789abcdef" * 2) == f"sha {R}"
    assert redact("id aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ0MTIz==") == f"id {R}"


def test_ordinary_text_is_kept() -> None:
    text = (
        '{"error": {"message": "model overloaded, retry later", "type": "server_error"}} '
        "/v1/chat/completions max_tokens: 100 prompt_tokens=12 internationalization-and-localization"
    )
    assert redact(text) == text


def test_the_excerpt_is_redacted_before_it_is_cut() -> None:
    key = "s3cr3t-" + "k" * 40
    text = "x" * 280 + " " + key  # a cut at 300 would leave the key's first 19 characters
    cut = redacted_excerpt(text, 300, [key])
    assert "s3cr3t" not in cut and cut == "x" * 280 + " " + R
    assert redacted_excerpt("a\n\n  b", 300) == "a b"
    assert redacted_excerpt("y" * 20, 10) == "y" * 10 + "..."
