"""The examples in aoz.omnm's docstrings are true."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    ["aoz.omnm._model", "aoz.omnm._codec", "aoz.omnm._json", "aoz.omnm._backend",
     "aoz._protocol.codecs"],
)
def test_docstring_examples(module: str) -> None:
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
