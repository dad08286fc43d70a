"""The Python examples of the README and of docs/python.md (which goes on from the README's) run as
written (in order, one namespace) and print what they say."""
import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README, REFERENCE = ROOT / "README.md", ROOT / "docs" / "python.md"
# What each example prints, in order.
EXPECTED = ["[3 3] 6",                              # chains: q = p, every draft accepted
            "[ 7  7 -1 -1] [3 1]",                  # logits: top_k = 1 removes the draft 2
            "[[5 6 0]] [[ 1  2 -1]]",               # trees: the second child, then its child
            "[ 4  5  3 -1] [3 2]"]                  # padded: q = p, every draft up to each count


def test_readme_examples():
    if not README.exists() or not REFERENCE.exists():
        pytest.skip("README.md and docs/python.md not beside the tests")
    section = README.read_text().split("## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = [(README, code) for code in re.findall(r"```python\n(.*?)```", section, re.S)]
    blocks += [(REFERENCE, code) for code in re.findall(r"```python\n(.*?)```", REFERENCE.read_text(), re.S)]
    assert len(blocks) == len(EXPECTED)
    namespace = {}
    for (where, code), expected in zip(blocks, EXPECTED):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(where), "exec"), namespace)
        assert expected in printed.getvalue(), printed.getvalue()
