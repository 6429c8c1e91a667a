"""What the drainer needs of the Elasticsearch stand-in, as Elasticsearch 8 does it: ``PUT
<index>/_mapping`` adds fields (also to a ``dynamic: strict`` index) and refuses to change a
field's type; an object field with ``enabled: false`` is kept in ``_source`` unparsed; a bulk
item whose source is not a JSON object fails alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from exactlyonce.integration.lab.es_stand_in import EsTestServer


@pytest.fixture
def client() -> Iterator[Elasticsearch]:
    with EsTestServer() as server, Elasticsearch(server.url, request_timeout=10) as es:
        yield es


def test_put_mapping_adds_fields_and_refuses_type_changes(client: Elasticsearch) -> None:
    client.indices.create(
        index="strict", mappings={"dynamic": "strict", "properties": {"kind": {"type": "keyword"}}}
    )
    with pytest.raises(BadRequestError) as refused:
        client.index(index="strict", id="a", document={"kind": "x", "topic": "t"})
    assert refused.value.error == "strict_dynamic_mapping_exception"

    added = {"topic": {"type": "keyword"}, "offsets": {"type": "object", "enabled": False}}
    assert client.indices.put_mapping(index="strict", properties=added)["acknowledged"]
    assert client.indices.put_mapping(index="strict", properties=added)["acknowledged"], (
        "the same mapping again is a no-op"
    )
    mapping = client.indices.get_mapping(index="strict")["strict"]["mappings"]
    assert mapping["dynamic"] == "strict"
    assert mapping["properties"] == {"kind": {"type": "keyword"}, **added}

    doc = {"kind": "x", "topic": "t", "offsets": {"0": 5, "any key": [1, {"b": None}]}}
    client.index(index="strict", id="a", document=doc)
    assert client.get(index="strict", id="a")["_source"] == doc, "kept whole, unparsed"

    with pytest.raises(BadRequestError) as changed:
        client.indices.put_mapping(index="strict", properties={"kind": {"type": "long"}})
    assert changed.value.error == "illegal_argument_exception"
    assert "cannot be changed from type [keyword] to [long]" in str(changed.value.body)
    with pytest.raises(NotFoundError):
        client.indices.put_mapping(index="missing", properties=added)


def test_a_bulk_item_that_is_not_a_json_object_fails_alone(client: Elasticsearch) -> None:
    """Elasticsearch parses each document when it indexes it: a source line that is not a
    JSON object fails its item (400), the request's other items apply."""
    body = (
        b'{"create":{"_index":"docs","_id":"good"}}\n{"a":1}\n'
        b'{"create":{"_index":"docs","_id":"bad"}}\n{"a": }\n'
        b'{"create":{"_index":"docs","_id":"list"}}\n[1,2]\n'
        b'{"create":{"_index":"docs","_id":"good2"}}\n{"a":2}\n'
    )
    response = client.bulk(operations=body)
    statuses = [item["create"]["status"] for item in response["items"]]
    assert statuses == [201, 400, 400, 201] and response["errors"]
    errors = [item["create"].get("error", {}).get("type") for item in response["items"]]
    assert errors == [None, "document_parsing_exception", "document_parsing_exception", None]
    assert client.get(index="docs", id="good2")["found"]


def test_filter_path_keeps_only_the_named_fields(client: Elasticsearch) -> None:
    body = (
        b'{"create":{"_index":"docs","_id":"a"}}\n{"a":1}\n'
        b'{"create":{"_index":"docs","_id":"a"}}\n{"a":1}\n'
    )
    response = client.bulk(operations=body, filter_path="errors,items.*.status,items.*.error.type")
    assert response.body == {
        "errors": True,
        "items": [
            {"create": {"status": 201}},
            {"create": {"status": 409, "error": {"type": "version_conflict_engine_exception"}}},
        ],
    }
    assert client.get(index="docs", id="a", filter_path="_id,nothing").body == {"_id": "a"}
    assert client.get(index="docs", id="a", filter_path="nothing").body == {}
