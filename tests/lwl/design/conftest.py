"""Fixtures shared by the design tests."""

import pytest


@pytest.fixture
def loopback_labs(monkeypatch):
    """Labs on loopback allowed as HTTP oracles (the outbound rules refuse them by default)."""
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_NETWORKS", "127.0.0.1/32")
