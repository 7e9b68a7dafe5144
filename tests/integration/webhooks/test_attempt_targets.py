"""Where an attempt connects, and what its delivery tells the tenant: the address that
was checked (never a second DNS answer), on every hop; redirects followed within the
subscription's origin only; an attempt that cannot be built, failed, not raised; and
errors that name no internal host, address or port (the operator's log has those)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence

import httpx
import pytest

from shared.infra.sealing import SecretBox
from shared.infra.targets import IPAddress
from shared.webhooks.attempt import Answer, Attempt, attempt
from shared.webhooks.policy import Policy
from tests.services import SEALING_KEY
from tests.webhook_receiver import Answer as ReceiverAnswer
from tests.webhook_receiver import Receiver

BOX = SecretBox(SEALING_KEY)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STRICT = Policy(max_attempts=3, backoff_s=1.0, timeout_s=2.0, allow_private=False)
DEV = Policy(max_attempts=3, backoff_s=1.0, timeout_s=2.0, allow_private=True)
PUBLIC = ipaddress.ip_address("93.184.215.14")
LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Answers:
    """A resolver that gives its answers in turn, the last one ever after: a name that
    answers a public address to the check and loopback to whoever asks next."""

    def __init__(self, *answers: IPAddress) -> None:
        self._answers = list(answers)

    def __call__(self, host: str) -> Sequence[IPAddress]:
        return [self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]]


class Internet(httpx.BaseTransport):
    """Stands in for the internet: a request to PUBLIC is answered here (by `answer`) and
    recorded; any other goes out for real, so a request that resolved its host again
    reaches whatever is listening on the loopback."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.requests: list[httpx.Request] = []
        self._answer = answer
        self._real = httpx.HTTPTransport(trust_env=False)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != str(PUBLIC):
            return self._real.handle_request(request)
        self.requests.append(request)
        return self._answer(request)


def claimed(url: str) -> Attempt:
    return Attempt(
        delivery_id=1, webhook_id=uuid.uuid4(), event_id=uuid.uuid4(), url=url,
        sealed_secret=BOX.seal(SECRET), body="{}", number=1,
    )  # fmt: skip


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


def test_an_attempt_connects_to_the_address_checked_not_to_a_second_dns_answer() -> None:
    internet = Internet(lambda _request: httpx.Response(204))
    with Receiver() as private, httpx.Client(transport=internet) as http:
        port = private.url.rsplit(":", 1)[1]
        url = f"http://localhost:{port}/internal-admin"

        answer = attempt(
            claimed(url), http=http, box=BOX, policy=STRICT, resolve=Answers(PUBLIC, LOOPBACK)
        )

    assert private.requests == []  # the rebound answer (loopback) was never asked for
    assert answer.delivered
    (request,) = internet.requests
    assert request.headers["host"] == f"localhost:{port}"
    assert (request.url.port, request.url.path) == (int(port), "/internal-admin")


def test_tls_is_still_verified_on_the_name_when_the_connection_goes_to_the_checked_address() -> (
    None
):
    internet = Internet(lambda _request: httpx.Response(204))
    with httpx.Client(transport=internet) as http:
        url = "https://hooks.example.com/in?x=1"

        answer = attempt(claimed(url), http=http, box=BOX, policy=STRICT, resolve=Answers(PUBLIC))

    assert answer.delivered
    (request,) = internet.requests
    assert str(request.url) == f"https://{PUBLIC}/in?x=1"
    assert request.headers["host"] == "hooks.example.com"
    assert request.extensions["sni_hostname"] == "hooks.example.com"  # SNI and certificate check
    # Pooled by address, a kept-alive connection verified for this name could carry
    # another name's request later: it serves this one request only.
    assert request.headers["connection"] == "close"


def test_every_redirect_hop_is_resolved_checked_and_pinned_again() -> None:
    internet = Internet(lambda _request: httpx.Response(307, headers={"location": "/next"}))
    with Receiver() as private, httpx.Client(transport=internet) as http:
        port = private.url.rsplit(":", 1)[1]
        url = f"http://localhost:{port}/hook"

        answer = attempt(
            claimed(url), http=http, box=BOX, policy=STRICT, resolve=Answers(PUBLIC, LOOPBACK)
        )

    assert private.requests == []
    assert [r.url.path for r in internet.requests] == ["/hook"]  # /next resolved to loopback
    assert not answer.delivered
    assert answer.error is not None
    assert answer.error.startswith("refused target: not a public address")


def test_a_redirect_to_another_origin_is_not_followed(http: httpx.Client) -> None:
    with Receiver() as receiver, Receiver() as elsewhere:
        moved = ReceiverAnswer(307, location=elsewhere.url + "/hook")
        receiver.answer_with(lambda _request, _n: moved)

        answer = attempt(claimed(receiver.url + "/hook"), http=http, box=BOX, policy=DEV)

    assert elsewhere.requests == []  # another port is another origin: the signed body stays
    assert [r.path for r in receiver.requests] == ["/hook"]
    assert (answer.status_code, answer.delivered) == (307, False)
    assert answer.error == "redirect to another origin, not followed"


def test_a_redirect_to_a_private_address_is_refused_and_not_named() -> None:
    metadata = "http://169.254.169.254/latest/meta-data"
    internet = Internet(lambda _request: httpx.Response(307, headers={"location": metadata}))
    with httpx.Client(transport=internet) as http:
        answer = attempt(
            claimed("http://hooks.example.com/hook"), http=http, box=BOX, policy=STRICT,
            resolve=Answers(PUBLIC),
        )  # fmt: skip

    assert len(internet.requests) == 1 and not answer.delivered
    assert answer.error is not None and "169.254" not in answer.error


@pytest.mark.parametrize(
    ("location", "answered"),
    [
        # httpx takes it (as host "h%5d"); urllib's urljoin raises ValueError on it.
        ("http://h]/", Answer(308, "redirect to another origin, not followed")),
        # urllib takes it; httpx refuses it before any hop ("Invalid port: 'x'").
        ("//[::1]x/", Answer(None, "no valid HTTP answer")),
    ],
)
def test_a_redirect_to_a_location_that_cannot_be_parsed_fails_the_attempt(
    http: httpx.Client, location: str, answered: Answer
) -> None:
    with Receiver() as receiver:
        receiver.answer_with(lambda _request, _n: ReceiverAnswer(308, location=location))

        answer = attempt(claimed(receiver.url + "/hook"), http=http, box=BOX, policy=DEV)

    assert answer == answered
    assert [r.path for r in receiver.requests] == ["/hook"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("case", ["refused", "timed out"])
def test_a_failed_connection_tells_the_tenant_only_that_and_the_operator_why(
    http: httpx.Client, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    with Receiver() as receiver, caplog.at_level(logging.INFO, "shared.webhooks"):
        receiver.answer_with(lambda _request, _n: ReceiverAnswer(204, delay_s=1.0))
        port = _closed_port() if case == "refused" else int(receiver.url.rsplit(":", 1)[1])
        fast = Policy(max_attempts=3, backoff_s=1.0, timeout_s=0.2, allow_private=True)

        answer = attempt(claimed(f"http://127.0.0.1:{port}/x"), http=http, box=BOX, policy=fast)

    assert answer == Answer(None, "connection failed")
    logged = caplog.text
    assert str(port) in logged and ("refused" in logged.lower() or "timeout" in logged.lower())
