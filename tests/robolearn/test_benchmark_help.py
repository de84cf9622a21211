"""``robolearn bench NAME --help`` says what a benchmark runs and what each option does.

The scripts are read with ``ast``, not imported: they import optional peers (d3rlpy, rsl-rl-lib, Warp).
"""

import ast
import importlib.util
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p for p in BENCH_DIR.glob("*.py") if p.stem != "common")


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """The calls of ``name(...)`` and ``<anything>.name(...)`` in ``tree``."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and name in (getattr(node.func, "id", None), getattr(node.func, "attr", None))]


def test_the_scripts_are_found():
    assert len(SCRIPTS) > 20 and BENCH_DIR / "ppo_pendulum.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_option_has_help(script):
    tree = ast.parse(script.read_text())
    missing = [f"line {call.lineno}: {ast.unparse(call.args[0]) if call.args else '?'}"
               for call in calls(tree, "add_argument") if not any(k.arg == "help" for k in call.keywords)]
    assert not missing, f"{script.name}: add_argument without help=: {missing}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_the_parser_is_built_from_the_docstring(script):
    tree = ast.parse(script.read_text())
    assert (ast.get_docstring(tree) or "").strip(), f"{script.name}: the docstring is --help's description"
    if not any(calls(tree, name) for name in ("ArgumentParser", "add_argument", "parse_args")):
        return  # a script that takes no arguments: its docstring is what `robolearn bench` shows of it
    assert not calls(tree, "ArgumentParser"), f"{script.name}: build the parser with common.benchmark_parser"
    built = calls(tree, "benchmark_parser")
    assert len(built) == 1, f"{script.name}: one benchmark_parser(__doc__) call, found {len(built)}"
    assert [ast.unparse(a) for a in built[0].args] == ["__doc__"], f"{script.name}: benchmark_parser(__doc__)"


def test_help_shows_the_docstring_as_written_and_meaningful_defaults():
    spec = importlib.util.spec_from_file_location("benchmarks_common", BENCH_DIR / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    parser = common.benchmark_parser("What it measures.\n\n    python x.py --seeds 3\n")
    parser.add_argument("--seeds", type=int, default=3, help="seeds")
    parser.add_argument("--root", help="where (else $HOME)")
    parser.add_argument("--quick", action="store_true", help="short")
    text = parser.format_help()
    assert "What it measures.\n\n    python x.py --seeds 3\n" in text  # line breaks kept
    assert "seeds (default: 3)" in text
    assert "(default: None)" not in text and "(default: False)" not in text
