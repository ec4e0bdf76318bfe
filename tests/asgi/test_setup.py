"""The real-server tests' setup: a missing uvicorn or chromium skips on a laptop and fails under CI."""

from __future__ import annotations

import shutil

import pytest

from tests.asgi import servers


def test_missing_server_parts_skip_on_a_laptop_and_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        servers.chromium_binary()
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        servers.require("no_such_module_here", "it does not exist")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="make chromium"):
        servers.chromium_binary()
