"""Fixtures of the runtime tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["whole", "chunked"])
def score_chunking(request, monkeypatch):
    """Run an attention reference test twice: at the default ``SCORE_CHUNK`` (these small problems in one
    piece) and with a budget of one score, so that ``by_score_chunks`` cuts every problem into one piece
    per (batch element, KV head) (``score_chunks``, tested in test_attention_reference.py); the chunked
    run checks that the references went through it."""
    from isagen.runtime import attention
    if request.param == "whole":
        yield request.param
        return
    monkeypatch.setattr(attention, "SCORE_CHUNK", 1)
    pieces: list[int] = []
    plan = attention.score_chunks

    def recording(*args):
        rows = plan(*args)
        pieces.append(sum(len(r) for r in rows))
        return rows
    monkeypatch.setattr(attention, "score_chunks", recording)
    yield request.param
    assert pieces, "no reference went through by_score_chunks"
