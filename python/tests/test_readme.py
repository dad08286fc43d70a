"""The README's Python example runs as written."""
import contextlib
import io
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example():
    if not README.exists():
        pytest.skip("README.md not beside the tests")
    section = README.read_text().split("## Python\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    assert "[3 3] 6" in printed.getvalue()  # q = p: every draft accepted
