"""Run the README's quick start against the installed boundedgate (a wheel in a clean venv, say).

Usage: python quick_start.py README.md. Exits non-zero when the package imported is not an
installed one, when the block raises, or when a line it prints differs from the one it shows.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import boundedgate

readme = Path(sys.argv[1]).read_text(encoding="utf-8")
start = readme.index("## Quick start")
block = re.search(r"```python\n(.*?)```", readme[start:], flags=re.DOTALL)
if block is None:
    sys.exit("no python block under '## Quick start'")
if "site-packages" not in boundedgate.__file__:
    sys.exit(f"boundedgate comes from {boundedgate.__file__}, not from an installed package")
shown = [
    line.split("  # ", 1)[1].split(": ")[0]
    for line in block.group(1).splitlines()
    if "print(" in line and "  # " in line
]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    exec(compile(block.group(1), "README.md", "exec"), {"__name__": "__main__"})
printed = out.getvalue().splitlines()
missing = [line for line in shown if line not in printed]
print(out.getvalue(), end="")
if missing:
    sys.exit(f"the quick start did not print {missing}")
print(f"quick start OK with boundedgate {boundedgate.__version__} from {boundedgate.__file__}")
