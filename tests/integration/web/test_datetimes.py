"""Every datetime the API accepts, in a query or a body, is read in UTC and within
PostgreSQL's range; anything else is a 422 naming the field, with nothing written.

The fields are found in the OpenAPI document, so a datetime added to any request model
is held to the same rule without touching this test.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

# Offsets Python reads and PostgreSQL refuses (it stops at ±15:59): read as UTC moments.
FAR_OFFSETS = {
    "2026-01-01T00:00:00+16:00": "2025-12-31T08:00:00Z",
    "2026-01-01T00:00:00-23:59": "2026-01-01T23:59:00Z",
}
# Valid ISO-8601 with an offset, but no moment Python (so no moment we store) can hold.
OUT_OF_RANGE = ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-10:00")
# The other query parameters a route with a datetime in its query requires, sent with it.
REQUIRED_ALONGSIDE = {
    "/agents-api/facts/history": {"agentId": "planner", "userId": "ada", "key": "tz"},
}


def _schemas(schema: dict[str, Any], document: dict[str, Any]) -> list[dict[str, Any]]:
    """`schema` and its alternatives (anyOf/oneOf), references resolved."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return _schemas(document["components"]["schemas"][name], document)
    found = [schema]
    for alternative in schema.get("anyOf", []) + schema.get("oneOf", []):
        found += _schemas(alternative, document)
    return found


def _is_datetime(schema: dict[str, Any], document: dict[str, Any]) -> bool:
    return any(s.get("format") == "date-time" for s in _schemas(schema, document))


def _datetime_fields(document: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(method, path, "query" or "body", field) of every datetime a request can carry."""
    fields = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if _is_datetime(parameter["schema"], document):
                    assert parameter["in"] == "query", f"{method} {path}: extend this test"
                    required = {
                        p["name"]
                        for p in operation["parameters"]
                        if p.get("required") and p["name"] != parameter["name"]
                    }
                    assert required <= set(REQUIRED_ALONGSIDE.get(path, {})), f"{path}: extend"
                    fields.append((method.upper(), path, "query", parameter["name"]))
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                for body in _schemas(media["schema"], document):
                    for name, prop in body.get("properties", {}).items():
                        if _is_datetime(prop, document):
                            # The test sends the field alone: the body must allow that.
                            assert set(body.get("required", [])) <= {name}, f"{path}: extend"
                            fields.append((method.upper(), path, "body", name))
    return fields


@pytest.fixture
def document(client: FlaskClient) -> dict[str, Any]:
    document: Any = client.get("/agents-api/openapi.json").json
    return dict(document)


@pytest.fixture
def datetime_fields(document: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    fields = _datetime_fields(document)
    # The walk finds what is there (a walk that finds nothing tests nothing).
    assert ("POST", "/agents-api/reevaluations", "body", "since") in fields
    assert ("GET", "/agents-api/usage", "query", "since") in fields
    return fields


def _send(
    client: FlaskClient, auth: dict[str, str], field: tuple[str, str, str, str], value: str
) -> Any:
    method, path, where, name = field
    assert "{" not in path, f"{path}: extend this test with its path parameters"
    if where == "query":
        query = {**REQUIRED_ALONGSIDE.get(path, {}), name: value}
        return client.open(path, method=method, headers=auth, query_string=query)
    return client.open(path, method=method, headers=auth, json={name: value})


def _row_counts(connection: Connection) -> dict[str, int]:
    tables = connection.execute(
        text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    ).scalars()
    return {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in tables}


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_datetime_outside_the_storable_range_is_a_422_naming_it_and_writes_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    connection: Connection,
    datetime_fields: list[tuple[str, str, str, str]],
    value: str,
) -> None:
    for field in datetime_fields:
        before = _row_counts(connection)

        response = _send(client, auth, field, value)

        assert response.status_code == 422, (field, response.status_code, response.json)
        assert [f["field"] for f in response.json["error"]["fields"]] == [field[3]], field
        assert _row_counts(connection) == before, field


@pytest.mark.parametrize("value", FAR_OFFSETS)
def test_a_datetime_with_an_offset_postgresql_refuses_is_read_as_its_utc_moment(
    client: FlaskClient,
    auth: dict[str, str],
    datetime_fields: list[tuple[str, str, str, str]],
    value: str,
) -> None:
    for field in datetime_fields:
        response = _send(client, auth, field, value)

        assert 200 <= response.status_code < 300, (field, response.status_code, response.json)

    usage = client.get("/agents-api/usage", headers=auth, query_string={"since": value})
    assert usage.json["since"] == FAR_OFFSETS[value]  # type: ignore[index]
    started = client.post("/agents-api/reevaluations", headers=auth, json={"since": value})
    campaign = client.get(f"/agents-api/reevaluations/{started.json['id']}", headers=auth)  # type: ignore[index]
    assert campaign.json["since"] == FAR_OFFSETS[value]  # type: ignore[index]
