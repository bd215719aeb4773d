"""Result cards: validation, template fallback and sealing, rendering."""

import copy
import json

import pytest

from artifacts import card_library
from artifacts.card_library import DEFAULT_LAYOUT_FOR_TYPE, SEED_TEMPLATES
from artifacts.cards import (
    CardError,
    format_price,
    render_card_html,
    render_card_json,
    resolve_layout,
    sparkline_points,
    validate_card,
    validate_layout,
    validate_template,
)

TEMPLATES = {t["name"]: t for t in SEED_TEMPLATES}
REQUIRED_TEMPLATES = {
    "hotels", "flights", "emails", "email_draft", "stock_quotes", "job_offers", "recipes",
    "daily_briefing", "weather", "calendar_events", "news", "products", "generic_list",
}  # fmt: skip


def db_lookup(*names):
    """A stand-in for the template table holding copies of the named seed templates."""
    table = {n: copy.deepcopy(TEMPLATES[n]) for n in names}
    return table.get


def hotel(**overrides):
    item = {
        "title": "Memmo Alfama",
        "subtitle": "Alfama",
        "image": "https://images.example.com/memmo.jpg",
        "url": "https://example.com/memmo",
        "price": {"amount": 129.0, "currency": "eur", "period": "night"},
        "rating": 4.5,
        "fields": [{"label": "Check-in", "value": "15:00"}],
        "chips": ["Pool", "Wifi"],
        "callouts": [{"tone": "info", "text": "Breakfast included"}],
        "text": "A **quiet** hotel.",
        "change": {"value": -1.2, "percent": -0.8},
        "trend": [1.0, 2.5, 2.0],
        "actions": [{"id": "book", "label": "Book", "style": "primary"}],
        "data": {"hotel_id": 7},
    }
    item.update(overrides)
    return item


def result(*items, **top):
    return {"type": "hotels", "items": list(items) or [hotel()], **top}


def rejects(payload):
    with pytest.raises(CardError) as caught:
        validate_card(payload)
    return caught.value


# ---- the library -----------------------------------------------------------------------


def test_the_library_has_every_required_template():
    assert REQUIRED_TEMPLATES <= set(TEMPLATES)
    assert len(TEMPLATES) == len(SEED_TEMPLATES)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_seed_template_and_its_sample_validate(name):
    template = validate_template(TEMPLATES[name])
    assert template["name"] == name
    assert template["sample"]["items"]


def test_every_default_points_at_a_seeded_template():
    assert set(DEFAULT_LAYOUT_FOR_TYPE.values()) <= set(TEMPLATES)


def test_email_draft_comes_with_send_once_and_save_draft():
    actions = TEMPLATES["email_draft"]["default_actions"]
    assert [(a["id"], a["label"], a["once"]) for a in actions] == [
        ("send", "Send", True),
        ("save_draft", "Save draft", False),
    ]


# ---- validation ------------------------------------------------------------------------


def test_it_normalises_a_full_item():
    card = validate_card(result(hotel(subtitle=None)))
    assert card["type"] == "hotels"
    item = card["items"][0]
    assert "subtitle" not in item
    assert item["price"] == {"amount": 129.0, "currency": "EUR", "period": "night"}
    assert item["actions"] == [{"id": "book", "label": "Book", "style": "primary", "once": False}]
    assert item["callouts"] == [{"tone": "info", "text": "Breakfast included"}]


def test_it_returns_a_copy():
    payload = result()
    card = validate_card(payload)
    card["items"][0]["data"]["hotel_id"] = 8
    assert payload["items"][0]["data"]["hotel_id"] == 7


def test_it_turns_numeric_field_values_into_text():
    card = validate_card(result(hotel(fields=[{"label": "Serves", "value": 2}])))
    assert card["items"][0]["fields"] == [{"label": "Serves", "value": "2"}]


@pytest.mark.parametrize(
    ("payload", "code", "path"),
    [
        ([], "wrong_type", ""),
        ("hotels", "wrong_type", ""),
        ({"items": [hotel()]}, "missing_field", "type"),
        ({"type": "Hotels", "items": [hotel()]}, "invalid_slug", "type"),
        ({"type": "1hotels", "items": [hotel()]}, "invalid_slug", "type"),
        ({"type": "h" * 41, "items": [hotel()]}, "invalid_slug", "type"),
        ({"type": 3, "items": [hotel()]}, "invalid_slug", "type"),
        ({"type": "hotels", "template": "Fancy!", "items": [hotel()]}, "invalid_slug", "template"),
        ({"type": "hotels", "items": []}, "invalid_items", "items"),
        ({"type": "hotels", "items": {"0": hotel()}}, "invalid_items", "items"),
        ({"type": "hotels"}, "invalid_items", "items"),
        ({"type": "hotels", "items": [{"title": str(i)} for i in range(51)]}, "too_many", "items"),
        ({"type": "hotels", "items": [hotel()], "colour": "red"}, "unknown_key", "colour"),
        ({"type": "hotels", "title": "x" * 201, "items": [hotel()]}, "too_long", "title"),
        (result("not an item"), "wrong_type", "items[0]"),
        (result({"subtitle": "no title"}), "missing_field", "items[0].title"),
        (result(hotel(title="  ")), "missing_field", "items[0].title"),
        (result(hotel(title=5)), "wrong_type", "items[0].title"),
        (result(hotel(title="x" * 201)), "too_long", "items[0].title"),
        (result(hotel(), hotel(text="x" * 4001)), "too_long", "items[1].text"),
        (
            result(hotel(), hotel(), hotel(image="javascript:alert(1)")),
            "invalid_url",
            "items[2].image",
        ),
        (result(hotel(image="data:image/png;base64,AAAA")), "invalid_url", "items[0].image"),
        (result(hotel(url="JavaScript:alert(1)")), "invalid_url", "items[0].url"),
        (result(hotel(url="java\tscript:alert(1)")), "invalid_url", "items[0].url"),
        (result(hotel(url="ftp://example.com/x")), "invalid_url", "items[0].url"),
        (result(hotel(url="https:///nohost")), "invalid_url", "items[0].url"),
        (result(hotel(rating=5.5)), "out_of_range", "items[0].rating"),
        (result(hotel(rating=-1)), "out_of_range", "items[0].rating"),
        (result(hotel(rating="4")), "wrong_type", "items[0].rating"),
        (result(hotel(rating=True)), "wrong_type", "items[0].rating"),
        (result(hotel(price=129)), "wrong_type", "items[0].price"),
        (result(hotel(price={"currency": "EUR"})), "missing_field", "items[0].price.amount"),
        (
            result(hotel(price={"amount": 1, "currency": "EURO"})),
            "too_long",
            "items[0].price.currency",
        ),
        (
            result(hotel(price={"amount": 1, "currency": "E1"})),
            "wrong_value",
            "items[0].price.currency",
        ),
        (result(hotel(price={"amount": 1, "tax": 2})), "unknown_key", "items[0].price.tax"),
        (result(hotel(trend=list(range(201)))), "too_many", "items[0].trend"),
        (result(hotel(trend=[1, "2"])), "wrong_type", "items[0].trend[1]"),
        (result(hotel(trend=[1, float("nan")])), "wrong_type", ""),
        (result(hotel(trend=[])), "too_short", "items[0].trend"),
        (result(hotel(trend="1,2,3")), "wrong_type", "items[0].trend"),
        (
            result(hotel(actions=[{"id": f"a{i}", "label": "A"} for i in range(6)])),
            "too_many",
            "items[0].actions",
        ),
        (
            result(hotel(actions=[{"id": "Book Now", "label": "Book"}])),
            "invalid_slug",
            "items[0].actions[0].id",
        ),
        (result(hotel(actions=[{"id": "book"}])), "wrong_type", "items[0].actions[0].label"),
        (
            result(hotel(actions=[{"id": "book", "label": "B", "style": "huge"}])),
            "wrong_value",
            "items[0].actions[0].style",
        ),
        (
            result(hotel(actions=[{"id": "book", "label": "B", "once": "yes"}])),
            "wrong_type",
            "items[0].actions[0].once",
        ),
        (
            result(hotel(actions=[{"id": "b", "label": "B"}, {"id": "b", "label": "C"}])),
            "duplicate",
            "items[0].actions[1].id",
        ),
        (
            result(hotel(actions=[{"id": "b", "label": "B", "url": "https://x.io"}])),
            "unknown_key",
            "items[0].actions[0].url",
        ),
        (result(hotel(fields=[{"label": "A"}])), "wrong_type", "items[0].fields[0].value"),
        (result(hotel(fields=[["A", "B"]])), "wrong_type", "items[0].fields[0]"),
        (result(hotel(fields=[{"label": "A", "value": "B"}] * 21)), "too_many", "items[0].fields"),
        (result(hotel(chips=["ok", 3])), "wrong_type", "items[0].chips[1]"),
        (result(hotel(chips=["x" * 41])), "too_long", "items[0].chips[0]"),
        (
            result(hotel(callouts=[{"tone": "pink", "text": "x"}])),
            "wrong_value",
            "items[0].callouts[0].tone",
        ),
        (result(hotel(callouts=[{"tone": "info"}])), "wrong_type", "items[0].callouts[0].text"),
        (result(hotel(change={})), "missing_field", "items[0].change"),
        (result(hotel(trend=[1, 1e308])), "out_of_range", "items[0].trend[1]"),
        (result(hotel(price={"amount": 1e16})), "out_of_range", "items[0].price.amount"),
        (result(hotel(url="http://[::1")), "invalid_url", "items[0].url"),
        (result(hotel(change={"value": "up"})), "wrong_type", "items[0].change.value"),
        (result(hotel(data=[1, 2])), "wrong_type", "items[0].data"),
        (result(hotel(data={"blob": "x" * 3000})), "too_large", "items[0].data"),
        (result(hotel(colour="red")), "unknown_key", "items[0].colour"),
        (result(*[hotel(text="x" * 3000) for _ in range(25)]), "too_large", ""),
    ],
)
def test_it_rejects_malformed_results(payload, code, path):
    error = rejects(payload)
    assert (error.code, error.field_path) == (code, path)
    assert error.message.startswith(f"{path or 'card'}: ")
    assert str(error) == error.message


def test_error_messages_read_as_sentences_for_agents():
    error = rejects(result(hotel(), hotel(), hotel(image="javascript:alert(1)")))
    assert error.message == "items[2].image: only http and https URLs are allowed"
    error = rejects(result(hotel(colour="red")))
    assert error.message.startswith("items[0].colour: unknown key; allowed keys are actions, ")


def test_it_accepts_the_size_limits_exactly():
    item = hotel(title="t" * 200, text="x" * 4000, trend=[0] * 200)
    item["actions"] = [{"id": f"a{i}", "label": "A"} for i in range(5)]
    card = validate_card(result(*[{"title": str(i)} for i in range(49)], item))
    assert len(card["items"]) == 50


# ---- layouts and fallback --------------------------------------------------------------


def test_resolve_uses_the_named_template():
    sealed = resolve_layout("hotels", "recipes", db_lookup("recipes", "hotels"))
    assert (sealed["template"], sealed["version"]) == ("recipes", 1)
    assert sealed["layout"]["style"] == "grid"


def test_resolve_falls_back_to_the_type_default_when_the_template_was_deleted():
    sealed = resolve_layout("hotels", "fancy_hotels", db_lookup("hotels"))
    assert sealed["template"] == "hotels"
    assert sealed["requested"] == "fancy_hotels"
    assert sealed["layout"] == validate_layout(TEMPLATES["hotels"]["layout"])


def test_resolve_uses_the_seeded_default_when_the_table_lost_it_too():
    sealed = resolve_layout("flight", "gone", db_lookup())
    assert sealed["template"] == "flights"


def test_resolve_does_not_resurrect_a_deleted_named_template():
    # "recipes" is not in the table any more, so the hotels default wins over the seed copy.
    assert resolve_layout("hotels", "recipes", db_lookup("hotels"))["template"] == "hotels"


def test_resolve_falls_back_to_generic_list_for_unknown_types():
    sealed = resolve_layout("parking_spots", None, db_lookup())
    assert sealed["template"] == "generic_list"
    assert sealed["layout"]["badges"] == ["price", "rating"]


def test_resolve_finds_a_staff_template_named_after_a_new_type():
    parking = {**copy.deepcopy(TEMPLATES["generic_list"]), "name": "parking_spots", "version": 3}
    sealed = resolve_layout("parking_spots", None, {"parking_spots": parking}.get)
    assert (sealed["template"], sealed["version"]) == ("parking_spots", 3)


def test_resolve_treats_a_broken_template_as_missing():
    broken = copy.deepcopy(TEMPLATES["recipes"])
    broken["layout"]["style"] = "carousel"
    sealed = resolve_layout("recipes", "recipes", {"recipes": broken}.get)
    assert sealed["template"] == "recipes"
    assert sealed["layout"]["style"] == "grid"  # the seeded default, not the broken row


def test_sealed_layout_carries_default_actions():
    sealed = resolve_layout("email_draft", None, db_lookup("email_draft"))
    assert [a["id"] for a in sealed["default_actions"]] == ["send", "save_draft"]


@pytest.mark.parametrize(
    ("layout", "path"),
    [
        ({"title": "title"}, "layout.style"),
        ({"style": "list"}, "layout.title"),
        ({"style": "list", "title": "title", "media": "photo"}, "layout.media"),
        ({"style": "list", "title": "title", "badges": ["stars"]}, "layout.badges[0]"),
        ({"style": "list", "title": "title", "badges": ["price", "price"]}, "layout.badges[1]"),
        ({"style": "list", "title": "title", "sidebar": "text"}, "layout.sidebar"),
    ],
)
def test_it_rejects_malformed_layouts(layout, path):
    with pytest.raises(CardError) as caught:
        validate_layout(layout)
    assert caught.value.field_path == path


# ---- rendering -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_sample_renders_its_key_pieces(name):
    template = TEMPLATES[name]
    card = validate_card(template["sample"])
    sealed = resolve_layout(card["type"], name, db_lookup(name))
    out = render_card_html(card, sealed)
    layout = sealed["layout"]
    assert out.startswith(f'<section class="cards cards--{layout["style"]}"')
    for i, item in enumerate(card["items"]):
        assert f'<li class="card" data-item-index="{i}">' in out
        assert item["title"].replace("&", "&amp;").replace("'", "&#x27;") in out
        if "price" in item and "price" in layout["badges"]:
            assert f'<span class="price">{format_price(item["price"])}</span>' in out
        if "rating" in item and "rating" in layout["badges"]:
            assert f'aria-label="{item["rating"]:g} out of 5"' in out
        if "trend" in item and layout["trend"]:
            assert f'<polyline points="{sparkline_points(item["trend"])}"/>' in out
        actions = item.get("actions", []) + template.get("default_actions", [])
        for action in actions:
            assert f'data-card-action="{action["id"]}" data-item-index="{i}"' in out
    assert "{" not in out  # never raw JSON on screen


def test_it_renders_a_full_hotel_card():
    card = validate_card(result(title="Hotels in Lisbon"))
    out = render_card_html(card, resolve_layout("parking", None, db_lookup()))
    assert '<h3 class="cards__title">Hotels in Lisbon</h3>' in out
    assert '<img class="card__media" src="https://images.example.com/memmo.jpg"' in out
    assert (
        '<h4 class="card__title"><a href="https://example.com/memmo" target="_blank" '
        'rel="noopener noreferrer nofollow">Memmo Alfama</a></h4>'
    ) in out
    assert '<span class="price">€129 / night</span>' in out
    assert '<span class="rating" role="img" aria-label="4.5 out of 5">' in out
    assert out.count("star--on") == 4 and out.count("star--half") == 1
    assert '<dl class="card__rows"><div><dt>Check-in</dt><dd>15:00</dd></div></dl>' in out
    assert '<li class="chip">Pool</li><li class="chip">Wifi</li>' in out
    assert '<p class="callout callout--info">Breakfast included</p>' in out
    assert '<div class="card__body"><p>A <strong>quiet</strong> hotel.</p>' in out
    assert (
        '<span class="change change--down"><span aria-hidden="true">▼</span> -1.20 (-0.80%)' in out
    )
    assert '<polyline points="0,22 50,2 100,8.67"/>' in out
    assert (
        '<button type="button" class="btn btn--primary" data-card-action="book" '
        'data-item-index="0">Book</button>'
    ) in out
    assert "hotel_id" not in out


def test_it_adds_the_template_default_actions():
    card = validate_card(TEMPLATES["email_draft"]["sample"])
    out = render_card_html(card, resolve_layout("email_draft", None, db_lookup()))
    assert (
        '<button type="button" class="btn btn--primary" data-card-action="send" '
        'data-item-index="0" data-once="true">Send</button>'
    ) in out
    assert 'data-card-action="save_draft" data-item-index="0">Save draft</button>' in out


def test_it_renders_an_action_outcome_as_disabled():
    card = validate_card(TEMPLATES["email_draft"]["sample"])
    sealed = resolve_layout("email_draft", None, db_lookup())
    out = render_card_html(card, sealed, {"0:send": {"status": "done", "label": "Sent"}})
    assert (
        '<button type="button" class="btn btn--primary is-done" data-card-action="send" '
        'data-item-index="0" data-once="true" data-outcome="done" disabled>Sent</button>'
    ) in out
    assert 'data-card-action="save_draft" data-item-index="0">Save draft</button>' in out


def test_outcomes_apply_to_their_own_item_only():
    card = validate_card(result(hotel(), hotel()))
    out = render_card_html(
        card, resolve_layout("hotels"), {"1:book": {"status": "done", "label": "Booked"}}
    )
    assert 'data-item-index="0">Book</button>' in out
    assert 'data-item-index="1" data-outcome="done" disabled>Booked</button>' in out


def test_hidden_slots_stay_hidden():
    # The flights layout has no media, rating, body or trend slot.
    out = render_card_html(validate_card(result()), resolve_layout("flights"))
    for absent in ("card__media", "rating", "card__body", "<svg", "change--"):
        assert absent not in out
    assert '<span class="price">€129 / night</span>' in out


def test_it_escapes_every_string():
    evil = "<script>alert(1)</script>\"'"
    item = hotel(
        title=evil, subtitle=evil, text=evil, chips=[evil],
        fields=[{"label": evil, "value": evil}], callouts=[{"tone": "danger", "text": evil}],
        price={"amount": 1, "period": evil[:20]}, actions=[{"id": "go", "label": evil[:40]}],
        url='https://example.com/"><script>alert(1)</script>',
    )  # fmt: skip
    card = validate_card(result(item, title=evil))
    out = render_card_html(card, resolve_layout("generic_list"))
    assert "<script" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert 'href="https://example.com/&quot;&gt;&lt;script&gt;' in out


def test_it_survives_template_changes_after_sealing():
    card = validate_card(TEMPLATES["hotels"]["sample"])
    sealed = resolve_layout("hotels", "hotels", db_lookup())
    before = render_card_html(card, sealed)
    stored = json.loads(json.dumps(sealed))  # the message stores it as JSON
    # Staff edit the library entry itself, the very dict resolve_layout reads.
    hotels = next(t for t in card_library.SEED_TEMPLATES if t["name"] == "hotels")
    saved = copy.deepcopy(hotels)
    try:
        hotels["layout"]["style"] = "grid"
        hotels["layout"]["badges"].clear()
        hotels["layout"]["media"] = None
        hotels["version"] = 2
        assert resolve_layout("hotels", "hotels", db_lookup())["version"] == 2
        assert render_card_html(card, stored) == before
        assert render_card_html(card, sealed) == before
    finally:
        hotels.clear()
        hotels.update(saved)


def test_sparkline_handles_flat_and_single_point_series():
    assert sparkline_points([3, 3, 3]) == "0,12 50,12 100,12"
    assert sparkline_points([7]) == "0,12 100,12"
    assert sparkline_points([0, 10]) == "0,22 100,2"
    out = render_card_html(validate_card(result(hotel(trend=[5]))), resolve_layout("generic_list"))
    assert '<svg class="spark spark--flat"' in out


def test_change_indicator_shows_direction_and_sign():
    def change(**values):
        card = validate_card(result(hotel(change=values)))
        return render_card_html(card, resolve_layout("generic_list"))

    assert (
        '<span class="change change--up"><span aria-hidden="true">▲</span> +2.50 (+1.10%)'
        in change(value=2.5, percent=1.1)
    )
    assert '<span class="change change--flat"><span aria-hidden="true">■</span> +0.00' in change(
        value=0
    )
    assert '<span class="change change--down"><span aria-hidden="true">▼</span> -3.00%' in change(
        percent=-3
    )


@pytest.mark.parametrize(
    ("price", "text"),
    [
        ({"amount": 129.0, "currency": "EUR", "period": "night"}, "€129 / night"),
        ({"amount": 1234.5, "currency": "USD"}, "$1,234.50"),
        ({"amount": 72000, "currency": "CHF", "period": "year"}, "72,000 CHF / year"),
        ({"amount": -5, "currency": "GBP"}, "-£5"),
        ({"amount": 3}, "3"),
    ],
)
def test_format_price(price, text):
    assert format_price(price) == text


def test_json_rendering_lists_typed_elements_in_layout_order():
    card = validate_card(result())
    data = render_card_json(
        card, resolve_layout("generic_list"), {"0:book": {"status": "done", "label": "Booked"}}
    )
    assert (data["type"], data["template"], data["style"]) == ("hotels", "generic_list", "list")
    kinds = [el["kind"] for el in data["items"][0]["elements"]]
    assert kinds == [
        "image", "title", "subtitle", "price", "rating", "change", "trend",
        "callout", "rows", "chips", "text", "actions",
    ]  # fmt: skip
    elements = {el["kind"]: el for el in data["items"][0]["elements"]}
    assert elements["price"]["text"] == "€129 / night"
    assert elements["rating"]["label"] == "4.5 out of 5"
    assert elements["actions"]["actions"][0]["outcome"] == {"status": "done", "label": "Booked"}
    assert "data" not in json.dumps(data["items"][0]["elements"][1])
    json.dumps(data)  # plain data, serialisable as is
