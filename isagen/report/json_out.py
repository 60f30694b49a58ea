"""The JSON form of the register report: the analysed dict as it is (docs/report.md documents every
key; ``schema_version`` changes when a key changes meaning or goes away)."""

from __future__ import annotations

import json


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
