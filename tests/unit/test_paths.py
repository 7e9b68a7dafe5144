"""web/paths.py: the routed path keeps an encoded `/` (and `%`) inside its segment."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from web.paths import SegmentConverter, routed_path


@pytest.mark.parametrize("segment", ["a/b", "a%2Fb", "100%", "é ü", "?#&=+", "plain"])
def test_a_segment_sent_encoded_comes_back_exactly_and_stays_one_segment(segment: str) -> None:
    raw = "/agents-api/agents/" + quote(segment, safe="")

    routed = routed_path(raw)
    head, _, last = routed.rpartition("/")

    assert head == "/agents-api/agents"
    # The routed path is a WSGI string (bytes as latin-1), as the server hands it on.
    value = SegmentConverter(map=None).to_python(last.encode("latin-1").decode())  # type: ignore[arg-type]
    assert value == segment


def test_bytes_above_ascii_sent_unencoded_are_read_as_the_server_hands_them_on() -> None:
    # A WSGI server passes the target's bytes as latin-1 characters.
    raw = "/agents-api/agents/user:0 {é}".encode().decode("latin-1")

    routed = routed_path(raw)

    assert routed.encode("latin-1").decode() == "/agents-api/agents/user:0 {é}"
