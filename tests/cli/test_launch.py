"""The command line's launcher code (``flasheval/cli/launch.py``): ``"main"`` without a launcher, ``"all"``
under one; a group that already exists is used and left alone; a malformed timeout is one line before any
group is made. (Launches that create and end the group: ``tests/engine/test_distributed*.py``.)"""

from __future__ import annotations

import pytest

from flasheval.cli.launch import TIMEOUT_ENV, launch
from flasheval.errors import FlashevalError

dist = pytest.importorskip("torch.distributed")


def test_without_a_launcher_a_command_runs_on_this_process_alone(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with launch() as distributed:
        assert distributed == "main"
    monkeypatch.setenv("WORLD_SIZE", "2")
    with launch(enabled=False) as distributed:  # a command that runs no model
        assert distributed == "main"
    assert not dist.is_initialized()


def test_a_malformed_timeout_is_refused_before_any_group_is_made(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(FlashevalError, match=f"environment variable {TIMEOUT_ENV}: must be a number of seconds > 0, "
                                             "got 'soon'"):
        with launch():
            pass
    assert not dist.is_initialized()


def test_a_group_the_caller_made_is_used_and_left_as_it_is(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under a launcher; the caller's own group has one process here
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with launch() as distributed:
            assert distributed == "all"
        assert dist.is_initialized()  # not destroyed: flasheval did not make it
    finally:
        dist.destroy_process_group()
