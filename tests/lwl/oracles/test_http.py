import socket

import pytest

from lwl.oracles.http import URLNotAllowed, check_url


@pytest.fixture
def policy(monkeypatch):
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_HOSTS", "lab.example.org,127.0.0.1")
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_NETWORKS", "127.0.0.1/32")

    def resolve_to(ip):
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(2, 1, 6, "", (ip, 80))])

    return resolve_to


def test_allowed_public_host(policy):
    policy("93.184.216.34")
    assert check_url("https://lab.example.org/label") == ["93.184.216.34"]


@pytest.mark.parametrize("ip", ["10.0.0.5", "192.168.1.2", "169.254.169.254", "::1", "127.0.0.2", "0.0.0.0"])
def test_resolved_private_link_local_and_metadata_addresses_are_refused(policy, ip):
    policy(ip)  # the name is allowed, but it resolves somewhere it must not (DNS rebinding)
    with pytest.raises(URLNotAllowed, match="resolves to"):
        check_url("https://lab.example.org/label")


def test_explicitly_allowed_network_and_unlisted_hosts(policy):
    assert check_url("http://127.0.0.1:8080/x") == ["127.0.0.1"]
    with pytest.raises(URLNotAllowed, match="LWL_ORACLE_ALLOWED_HOSTS"):
        check_url("http://other.example.org/x")
    with pytest.raises(URLNotAllowed, match="http"):
        check_url("file:///etc/passwd")
