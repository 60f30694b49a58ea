"""What every fuzz test asserts of a refusal: an ``IsagenError`` whose message is one line."""

from __future__ import annotations

from hypothesis import settings

from isagen.errors import IsagenError


def examples(n: int) -> settings:
    """Settings for a test whose examples are expensive: ``n`` of them in the ci profile, the profile's
    own ratio more in the others (``long`` has 50x the ci count)."""
    base = settings.default.max_examples
    return settings(max_examples=max(1, n * base // 40))


def assert_one_line(error: BaseException) -> str:
    assert isinstance(error, IsagenError), f"{type(error).__name__}: {error}"
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)
    return text
