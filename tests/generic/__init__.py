"""The generic behaviour suite: one set of tests, run over every gate that promises the same semantics."""

import pytest

# The accounting checks live in a helper module: have pytest explain their failures too.
pytest.register_assert_rewrite("tests.generic.calls")
