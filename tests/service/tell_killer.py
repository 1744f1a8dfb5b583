"""A test-only launcher: ``python -m tests.service.tell_killer serve ...`` runs ``lwl serve``
whose API SIGKILLs itself between a round-completing tell's commit and its message (the one
moment a crash could strand a told job), through ``create_app``'s ``after_tell_commit`` hook.
Production code reads no variable for it: only this module installs the hook
(tests/service/test_outages.py, bench/faults.py)."""

from __future__ import annotations

import os
import signal

import service.app

_create_app = service.app.create_app


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def create_app(*args, **kwargs):
    """service.app.create_app with the kill hook installed."""
    return _create_app(*args, after_tell_commit=kill_self, **kwargs)


if __name__ == "__main__":
    service.app.create_app = create_app  # `lwl serve` imports it from service.app when it starts
    from lwl.cli import app

    app()
