"""The README's Python examples run as written (in order, one namespace) and print what they say."""
import contextlib
import io
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
# What each example prints, in order.
EXPECTED = ["[3 3] 6",                              # chains: q = p, every draft accepted
            "[ 7  7 -1 -1] [3 1]",                  # logits: top_k = 1 removes the draft 2
            "[[5 6 0]] [[ 1  2 -1]]",               # trees: the second child, then its child
            "[ 4  5  3 -1] [3 2]"]                  # padded: q = p, every draft up to each count


def test_readme_examples():
    if not README.exists():
        pytest.skip("README.md not beside the tests")
    section = README.read_text().split("## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == len(EXPECTED)
    namespace = {}
    for code, expected in zip(blocks, EXPECTED):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(README), "exec"), namespace)
        assert expected in printed.getvalue(), printed.getvalue()
