import time

import pytest

from lwl import webhooks


def test_sign_and_verify_round_trip():
    secret = webhooks.new_secret()
    body = b'{"type": "lwl.queries"}'
    h = webhooks.headers(secret, body)
    webhooks.verify(secret, h, body)
    with pytest.raises(ValueError, match="signature"):
        webhooks.verify(secret, h, body + b" ")
    with pytest.raises(ValueError, match="signature"):
        webhooks.verify(webhooks.new_secret(), h, body)
    old = {**h, "webhook-timestamp": str(int(time.time()) - 3600)}
    old["webhook-signature"] = webhooks.sign(secret, h["webhook-id"], int(old["webhook-timestamp"]), body)
    with pytest.raises(ValueError, match="tolerance"):
        webhooks.verify(secret, old, body)


def test_known_vector():
    # the Standard Webhooks reference example
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    sig = webhooks.sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
