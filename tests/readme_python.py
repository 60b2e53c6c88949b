#!/usr/bin/env python3
"""The README's Python quick start code as written: with N, the Nth
(0-based) ```python block of its "## Python quick start" section (up to
the next "## "); without, how many blocks there are. Used by
tests/python_pkg_test.sh (CI, block 0) and tests/gpu/python_quickstart.sh
(the GPU machine, every block), so the README is the only copy.
usage: readme_python.py README.md [N]"""
import re
import sys

text = open(sys.argv[1]).read()
start = text.index("## Python quick start")
end = text.find("\n## ", start + 1)
blocks = re.findall(r"```python\n(.*?)```", text[start:end if end > 0 else len(text)], re.S)
if not blocks:
    sys.exit("readme_python.py: no ```python block under '## Python quick start' in %s" % sys.argv[1])
if len(sys.argv) > 2:
    n = int(sys.argv[2])
    if not 0 <= n < len(blocks):
        sys.exit("readme_python.py: the quick start has %d python blocks, no block %d" % (len(blocks), n))
    print(blocks[n], end="")
else:
    print(len(blocks))
