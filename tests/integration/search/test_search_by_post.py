"""POST /agents-api/search ([4.1]): GET's parameters in a JSON body, for a search text
of the documented length that no request line holds; the same answer, limits and errors."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.search.service import MAX_QUERY_CHARS
from tests.integration.search.test_search import SCOPE, talk


def post_search(client: FlaskClient, auth: dict[str, str], body: dict[str, Any]) -> Any:
    return client.post("/agents-api/search", headers=auth, json={**SCOPE, **body})


def test_post_answers_as_get_does(client: FlaskClient, auth: dict[str, str]) -> None:
    talk(client, auth, "My sister's wedding is in Lisbon in June.", "Lovely city!")
    asked = {"q": "Where is the wedding?", "limit": 3, "kind": "message"}
    got = client.get("/agents-api/search", headers=auth, query_string={**SCOPE, **asked})

    posted = post_search(client, auth, asked)

    assert posted.status_code == got.status_code == 200, posted.json
    assert posted.json == got.json
    assert "Lisbon" in posted.json["results"][0]["snippet"]  # type: ignore[index]


def test_a_search_text_of_the_documented_length_in_cjk_is_searched_41(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    talk(client, auth, "記" * 40, "Noted.")

    posted = post_search(client, auth, {"q": "記" * MAX_QUERY_CHARS})

    assert posted.status_code == 200, posted.json


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"q": "記" * (MAX_QUERY_CHARS + 1)}, "q"),
        ({"q": ""}, "q"),
        ({"q": "x", "limit": "5"}, "limit"),  # JSON types are not coerced
        ({"q": "x", "kind": "fact"}, "kind"),
        ({"q": "x", "includeDeprecated": "true"}, "includeDeprecated"),
        ({"q": "x", "agentId": ""}, "agentId"),
        ({"q": "x", "scope": "all"}, "scope"),
    ],
)
def test_a_bad_body_is_a_422_naming_its_field(
    client: FlaskClient, auth: dict[str, str], body: dict[str, Any], field: str
) -> None:
    refused = post_search(client, auth, body)

    assert refused.status_code == 422, refused.json
    assert field in refused.json["error"]["message"]  # type: ignore[index]
