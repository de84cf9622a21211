"""README's calls of ``sims.make_env`` pass what it requires (``num_envs`` had been left out of one a user copies)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import sims

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_calls() -> list[str]:
    """Each ``sims.make_env(...)`` README writes, a call continued in the next line's comment joined to its start."""
    text = re.sub(r"\n[^\n#]*# ", " ", README.read_text())
    calls = []
    for start in (match.start() for match in re.finditer(r"sims\.make_env\(", text)):
        depth, end = 0, start
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if text[end] == ")" and depth == 0:
                break
        calls.append(text[start:end + 1])
    return calls


def test_readme_calls_bind_to_make_env():
    calls = readme_calls()
    assert len(calls) >= 2, calls
    signature = inspect.signature(sims.make_env)
    for written in calls:
        call = ast.parse(written, mode="eval").body
        assert isinstance(call, ast.Call), written
        signature.bind(*call.args, **{keyword.arg: keyword.value for keyword in call.keywords})  # TypeError: README
