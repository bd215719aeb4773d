"""events.wire: one walk that must give exactly what the JSON round trip through Django's
encoder and the REST API's camelCase conversion give."""

import datetime
import decimal
import json
import uuid

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.functional import lazy
from djangorestframework_camel_case.util import camelize

from agntchat.core.events import json_bytes, wire
from conversations.models import Message


def round_trip(data):
    return camelize(json.loads(json.dumps(data, cls=DjangoJSONEncoder)))


def test_wire_matches_the_json_round_trip_and_camel_case():
    lazy_text = lazy(lambda: "lazy text", str)()
    data = {
        "message_id": uuid.uuid4(),
        "created_at": datetime.datetime(2026, 11, 30, 20, 1, 2, 345678, tzinfo=datetime.UTC),
        "naive_at": datetime.datetime(2026, 1, 2, 3, 4, 5),
        "day": datetime.date(2026, 11, 30),
        "time_of_day": datetime.time(9, 30, 15, 120000),
        "took": datetime.timedelta(seconds=90, microseconds=5),
        "cost_usd": decimal.Decimal("0.0123"),
        "kind": Message.Kind.TEXT,
        "label": lazy_text,
        "nested_list": [{"inner_key": (1, 2.5, None, True)}, ["a_b", {"x_1": "y_2"}]],
        "payload": {"card": {"block_type": "TextBlock", "is_subtle": False}},
        1: "number key",
        2.5: "float key",
        None: "null key",
        "already_camelCase": "kept",
        "__private": 1,
        "trailing_": 2,
        "with2_numbers_3x": 3,
        "": "empty",
    }
    assert wire(data) == round_trip(data)
    assert json.dumps(wire(data)) == json.dumps(round_trip(data))


def test_wire_leaves_plain_json_types_as_they_are():
    for value in ("text", 3, 2.5, True, None, [], {}, {False: "bool key"}):
        assert wire(value) == round_trip(value)


def test_json_bytes_writes_what_orjson_refuses_and_the_same_json_otherwise():
    data = wire({"message_id": uuid.uuid4(), "sent_at": datetime.datetime.now(datetime.UTC)})
    assert json.loads(json_bytes(data)) == data
    # Past 64 bits, and a lone surrogate (JSON can escape it; UTF-8 cannot hold it).
    for odd in ({"n": 2**70}, {"text": "half a pair \ud800"}):
        assert json.loads(json_bytes(odd)) == odd
