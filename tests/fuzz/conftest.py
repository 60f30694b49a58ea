"""Hypothesis profiles of the fuzz suite (tests/fuzz/), chosen by ``ISAGEN_FUZZ_PROFILE``:

- ``ci`` (the default, what ``make test`` runs): derandomized (the same examples on every run, so a
  failure reproduces and CI is not flaky), a modest number of examples per test, no per-example
  deadline (the emulator and a busy 2-core machine make single examples slow now and then);
- ``long``: random examples, 50 times as many, for a search before a release or after a change to a
  parser: ``ISAGEN_FUZZ_PROFILE=long python -m pytest tests/fuzz`` (docs/fuzzing.md).

A test that needs fewer examples than the profile (one that launches the emulator) scales its count with
``examples(n)``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {"ci": dict(derandomize=True, max_examples=40), "long": dict(derandomize=False, max_examples=2000)}
COMMON = dict(deadline=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])

for _name, _values in PROFILES.items():
    settings.register_profile(f"isagen-{_name}", **_values, **COMMON)

PROFILE = os.environ.get("ISAGEN_FUZZ_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"ISAGEN_FUZZ_PROFILE={PROFILE!r}: choose one of {', '.join(PROFILES)}")
settings.load_profile(f"isagen-{PROFILE}")
