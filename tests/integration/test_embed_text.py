"""What the embedder sees: prompts sharing a 1,500-piece prefix, with the real MiniLM; and the
gateway applying a router's embed-text rule."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select

from app.main import create_app
from app.store.models import DecisionRow
from bench import mmlu_questions as questions
from embeddings.minilm import load_minilm, load_wordpieces
from embeddings.prompt_text import EmbedText, embedding_texts, pool
from routers.base import Context, Observation
from routers.registry import build_policy
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running
from tests.mmlu_prompts import TOPICS, mmlu_questions

MATH = ["elementary_mathematics", "high_school_mathematics"]
HUMANITIES = ["prehistory", "world_religions"]
PREFIX_PIECES = 1500


def distinct(vectors: np.ndarray) -> int:
    return len({tuple(row) for row in np.round(vectors, 6)})


def few_shot_prefix(subject: str, title: str) -> str:
    """A few-shot template of at least ``PREFIX_PIECES`` MiniLM word pieces from one MMLU subject."""
    return questions.few_shot_prefix(TOPICS, subject, title, PREFIX_PIECES)


def embed(prompts: list, rule: EmbedText) -> np.ndarray:
    tokenizer, model = load_wordpieces(), load_minilm()
    per_prompt = [embedding_texts(p, rule, tokenizer) for p in prompts]
    flat = sorted({t for texts in per_prompt for t in texts})
    vectors = dict(zip(flat, model.embed(flat), strict=True))
    return np.stack([pool(np.stack([vectors[t] for t in texts])) for texts in per_prompt])


@pytest.fixture(scope="module")
def shared_prefix_set() -> tuple[list[str], np.ndarray, np.ndarray]:
    """200 prompts: one 1,500-piece prefix, then a maths (topic 0) or a history/religion (topic 1)
    question, under the default rule."""
    prefix = few_shot_prefix("high_school_biology", "biology")
    questions = mmlu_questions(MATH, 100) + mmlu_questions(HUMANITIES, 100)
    topics = np.array([0] * 100 + [1] * 100)
    prompts = [prefix + question for question in questions]
    return prompts, embed(prompts, EmbedText()), topics


def test_prompts_sharing_a_long_prefix_get_distinct_embeddings(shared_prefix_set) -> None:
    prompts, vectors, _ = shared_prefix_set
    assert distinct(vectors) == 200
    assert distinct(embed(prompts[:20], EmbedText("head"))) == 1  # the old rule: one vector for all


def test_a_policy_learns_the_topic_split_behind_the_prefix(shared_prefix_set) -> None:
    """Arm a is right for maths, arm b for history/religion. kNN-UCB with its product defaults plays the
    200 prompts once each (no repeats) in a random order; uniform random earns 0.5 a round.

    The shared prefix compresses the distances (same-topic pairs 0.061 apart on average, other-topic pairs
    0.074), so the variogram finds no slope (l ~ 0) and only the cap on k keeps the estimate local: with k
    allowed up to the arm's whole history it earned 0.51-0.59 here; the default cap
    max(32, ceil(N_g / 2)) keeps k within the nearest half of an arm's points (docs/policies/knn-ucb.md,
    "The cap on k")."""
    _, vectors, topics = shared_prefix_set
    arms = ["a", "b"]
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(topics))
        policy = build_policy("knn-ucb", arms, seed)
        rewards = []
        for t, i in enumerate(order):
            decision = policy.select(Context(embedding=vectors[i], rng=np.random.default_rng([seed, t])))
            reward = float(decision.arms[0] == arms[topics[i]])
            policy.update(Observation(embedding=vectors[i], arm=decision.arms[0], reward=reward))
            rewards.append(reward)
        assert np.mean(rewards[100:]) >= 0.75, (seed, np.mean(rewards[100:]))


def test_the_question_outweighs_the_system_prompt_in_chat_messages() -> None:
    """The same question under two different 1,500-piece system prompts is nearer than two different
    questions under one (the default rule embeds the user turn; the old one kept the system prompt)."""
    prefixes = [
        few_shot_prefix("high_school_biology", "biology"),
        few_shot_prefix("professional_law", "law"),
    ]
    questions = mmlu_questions(MATH, 5) + mmlu_questions(HUMANITIES, 5)
    for rule, holds in ((EmbedText(), True), (EmbedText("head"), False)):
        chats = [[("system", p), ("user", q)] for p in prefixes for q in questions]
        vectors = embed(chats, rule).reshape(2, len(questions), -1)
        same_question = np.einsum("qd,qd->q", vectors[0], vectors[1]).min()
        gram = vectors[0] @ vectors[0].T
        other_questions = gram[np.triu_indices(len(questions), 1)].max()
        assert (same_question > other_questions) == holds, rule


async def test_the_gateway_embeds_by_the_routers_rule(stack: Stack) -> None:
    """Through /v1-style messages: the default rule embeds the last user turn (the shared system prompt
    is dropped); after PATCHing the router to head:8 it embeds the first 8 pieces (32 characters with the
    hashing embedder); a long plain prompt is embedded head + tail."""
    system = "You are a helpful assistant. " * 100
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
        model = ctx.embeddings.embedder

        async def routed(body: dict) -> np.ndarray:
            decision = (await client.post("/route", json=body, headers=bearer(t.key))).json()
            async with ctx.sessionmaker() as session:
                row = await session.scalar(
                    select(DecisionRow).where(DecisionRow.id == decision["decision_id"])
                )
            return np.frombuffer(row.embedding, dtype=np.float32)

        chat = [{"role": "system", "content": system}, {"role": "user", "content": "what is 2 + 2?"}]
        assert np.array_equal(await routed({"messages": chat}), model.embed(["what is 2 + 2?"])[0])
        long_prompt = "head words " * 200 + "the question at the very end"  # 2,228 characters: 557 pieces
        # budget 256 pieces: the head's 64 (256 characters); the tail's 192 would start at piece 365
        # (character 1,460, inside "words"), so it starts at the next word, piece 367 (character 1,468)
        text = long_prompt[:256] + "\n" + long_prompt[1468:]
        assert np.array_equal(await routed({"prompt": long_prompt}), model.embed([text])[0])
        patch = {"embed_text": {"strategy": "head", "max_tokens": 8}}
        url = f"/admin/tenants/{t.tenant}/routers/main"
        assert (await client.patch(url, json=patch, headers=admin_headers())).status_code == 200
        assert np.array_equal(await routed({"messages": chat}), model.embed([system[:32]])[0])
