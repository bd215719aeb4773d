"""Rich result cards: validation, layout resolution and sealing, HTML and JSON rendering."""

import copy
import json
import math
import re
from urllib.parse import urlsplit

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from artifacts.card_library import DEFAULT_LAYOUT_FOR_TYPE, GENERIC_TEMPLATE, SEED_TEMPLATES
from artifacts.rendering import LINK_REL, render_markdown

SLUG_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
MAX_CARD_BYTES = 64 * 1024
MAX_ITEMS = 50
MAX_ACTIONS = 5
MAX_TREND = 200
MAX_DATA_BYTES = 2048
MAX_NUMBER = 1e15
TONES = ("info", "success", "warning", "danger")
ACTION_STYLES = ("primary", "default", "danger")
# The template of a drafted email, whose buttons send it from the mailbox of the person clicking.
EMAIL_DRAFT = "email_draft"

CARD_KEYS = {"type", "template", "title", "items"}
ITEM_KEYS = {
    "title", "subtitle", "image", "url", "price", "rating", "fields", "chips",
    "callouts", "text", "change", "trend", "actions", "data",
}  # fmt: skip

# The layout vocabulary: a slot names the item element it shows (or null to hide it).
# Slots render in this order (badges right after the subtitle); `style` picks the arrangement.
LAYOUT_STYLES = ("list", "grid", "compact", "briefing")
LAYOUT_SLOTS = {
    "media": "image",
    "title": "title",
    "subtitle": "subtitle",
    "change": "change",
    "trend": "trend",
    "callouts": "callouts",
    "rows": "fields",
    "chips": "chips",
    "body": "text",
    "actions": "actions",
}
LAYOUT_BADGES = ("price", "rating")
TEMPLATE_KEYS = {
    "name",
    "result_type",
    "version",
    "description",
    "layout",
    "default_actions",
    "sample",
}


class CardError(ValueError):
    """A structured result or template that cannot be accepted; `message` names the field."""

    def __init__(self, code, message, field_path=""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field_path = field_path


def _fail(code, path, reason):
    raise CardError(code, f"{path or 'card'}: {reason}", path)


def _check_keys(obj, allowed, path):
    unknown = sorted(set(obj) - allowed)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        _fail("unknown_key", where, f"unknown key; allowed keys are {', '.join(sorted(allowed))}")


def _object(value, path):
    if not isinstance(value, dict):
        _fail("wrong_type", path, "must be an object")
    return value


def _text(value, path, limit, required=False):
    if not isinstance(value, str):
        _fail("wrong_type", path, "must be a string")
    if required and not value.strip():
        _fail("missing_field", path, "must not be empty")
    if len(value) > limit:
        _fail("too_long", path, f"must be at most {limit} characters")
    return value


def _number(value, path):
    # bool is an int in Python but never a sensible number here.
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail("wrong_type", path, "must be a number")
    if not math.isfinite(value):
        _fail("wrong_type", path, "must be a finite number")
    # Bounded so prices stay readable and sparkline arithmetic cannot overflow.
    if abs(value) > MAX_NUMBER:
        _fail("out_of_range", path, "must be between -1e15 and 1e15")
    return value


def _slug(value, path):
    if not isinstance(value, str) or not SLUG_RE.match(value):
        _fail("invalid_slug", path, "must be a slug: a lowercase letter, then letters, digits or _")
    return value


def _url(value, path):
    _text(value, path, 2048, required=True)
    # Browsers ignore spaces and control characters inside schemes ("java\tscript:"); refuse them.
    try:
        parts = urlsplit(value)
    except ValueError:
        _fail("invalid_url", path, "is not a valid URL")
    if any(ord(c) <= 32 for c in value) or parts.scheme.lower() not in ("http", "https"):
        _fail("invalid_url", path, "only http and https URLs are allowed")
    if not parts.netloc:
        _fail("invalid_url", path, "must be an absolute URL with a host")
    return value


def _list(value, path, limit, min_len=0):
    if not isinstance(value, list):
        _fail("wrong_type", path, "must be a list")
    if len(value) < min_len:
        _fail("too_short", path, f"must have at least {min_len} entries")
    if len(value) > limit:
        _fail("too_many", path, f"must have at most {limit} entries")
    return value


def _json_size(value, path):
    try:
        return len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError, RecursionError):
        _fail("wrong_type", path, "must be plain JSON (objects, lists, strings, numbers)")


def validate_action(action, path):
    """Return a normalised action {id, label, style, once} or raise CardError."""
    _object(action, path)
    _check_keys(action, {"id", "label", "style", "once"}, path)
    style = action.get("style") or "default"
    if style not in ACTION_STYLES:
        _fail("wrong_value", f"{path}.style", f"must be one of {', '.join(ACTION_STYLES)}")
    once = action.get("once", False)
    if not isinstance(once, bool):
        _fail("wrong_type", f"{path}.once", "must be true or false")
    return {
        "id": _slug(action.get("id"), f"{path}.id"),
        "label": _text(action.get("label"), f"{path}.label", 40, required=True),
        "style": style,
        "once": once,
    }


def _validate_item(item, path):
    _object(item, path)
    _check_keys(item, ITEM_KEYS, path)
    # null means "not given": agents often emit every key.
    item = {k: v for k, v in item.items() if v is not None}
    if "title" not in item:
        _fail("missing_field", f"{path}.title", "is required")
    out = {"title": _text(item["title"], f"{path}.title", 200, required=True)}
    if "subtitle" in item:
        out["subtitle"] = _text(item["subtitle"], f"{path}.subtitle", 300)
    for key in ("image", "url"):
        if key in item:
            out[key] = _url(item[key], f"{path}.{key}")
    if "price" in item:
        out["price"] = _validate_price(item["price"], f"{path}.price")
    if "rating" in item:
        rating = _number(item["rating"], f"{path}.rating")
        if not 0 <= rating <= 5:
            _fail("out_of_range", f"{path}.rating", "must be between 0 and 5")
        out["rating"] = rating
    if "fields" in item:
        out["fields"] = [
            _validate_field(f, f"{path}.fields[{i}]")
            for i, f in enumerate(_list(item["fields"], f"{path}.fields", 20))
        ]
    if "chips" in item:
        chips = _list(item["chips"], f"{path}.chips", 20)
        out["chips"] = [
            _text(c, f"{path}.chips[{i}]", 40, required=True) for i, c in enumerate(chips)
        ]
    if "callouts" in item:
        out["callouts"] = [
            _validate_callout(c, f"{path}.callouts[{i}]")
            for i, c in enumerate(_list(item["callouts"], f"{path}.callouts", 5))
        ]
    if "text" in item:
        out["text"] = _text(item["text"], f"{path}.text", 4000)
    if "change" in item:
        out["change"] = _validate_change(item["change"], f"{path}.change")
    if "trend" in item:
        trend = _list(item["trend"], f"{path}.trend", MAX_TREND, min_len=1)
        out["trend"] = [_number(v, f"{path}.trend[{i}]") for i, v in enumerate(trend)]
    if "actions" in item:
        actions = _list(item["actions"], f"{path}.actions", MAX_ACTIONS)
        out["actions"] = _validate_actions(actions, f"{path}.actions")
    if "data" in item:
        _object(item["data"], f"{path}.data")
        if _json_size(item["data"], f"{path}.data") > MAX_DATA_BYTES:
            _fail("too_large", f"{path}.data", f"must be at most {MAX_DATA_BYTES} bytes of JSON")
        out["data"] = copy.deepcopy(item["data"])
    return out


def _validate_actions(actions, path):
    out = [validate_action(a, f"{path}[{i}]") for i, a in enumerate(actions)]
    ids = [a["id"] for a in out]
    for i, action_id in enumerate(ids):
        if action_id in ids[:i]:
            _fail("duplicate", f"{path}[{i}].id", f"duplicate action id {action_id!r}")
    return out


def _validate_price(price, path):
    _object(price, path)
    _check_keys(price, {"amount", "currency", "period"}, path)
    if "amount" not in price:
        _fail("missing_field", f"{path}.amount", "is required")
    out = {"amount": _number(price["amount"], f"{path}.amount")}
    if price.get("currency") is not None:
        currency = _text(price["currency"], f"{path}.currency", 3).upper()
        if not CURRENCY_RE.match(currency):
            _fail("wrong_value", f"{path}.currency", "must be a 3-letter ISO code like EUR")
        out["currency"] = currency
    if price.get("period") is not None:
        out["period"] = _text(price["period"], f"{path}.period", 20, required=True)
    return out


def _validate_field(field, path):
    _object(field, path)
    _check_keys(field, {"label", "value"}, path)
    value = field.get("value")
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(_number(value, f"{path}.value"))
    return {
        "label": _text(field.get("label"), f"{path}.label", 60, required=True),
        "value": _text(value, f"{path}.value", 500),
    }


def _validate_callout(callout, path):
    _object(callout, path)
    _check_keys(callout, {"tone", "text"}, path)
    tone = callout.get("tone") or "info"
    if tone not in TONES:
        _fail("wrong_value", f"{path}.tone", f"must be one of {', '.join(TONES)}")
    return {"tone": tone, "text": _text(callout.get("text"), f"{path}.text", 500, required=True)}


def _validate_change(change, path):
    _object(change, path)
    _check_keys(change, {"value", "percent"}, path)
    out = {k: _number(change[k], f"{path}.{k}") for k in ("value", "percent") if k in change}
    if not out:
        _fail("missing_field", path, "needs a value or a percent")
    return out


def validate_card(payload):
    """Return a normalised copy of a structured result, or raise CardError naming the field."""
    _object(payload, "")
    if _json_size(payload, "") > MAX_CARD_BYTES:
        _fail("too_large", "", f"must be at most {MAX_CARD_BYTES // 1024} KB of JSON")
    _check_keys(payload, CARD_KEYS, "")
    if "type" not in payload:
        _fail("missing_field", "type", "is required")
    card = {"type": _slug(payload["type"], "type")}
    if payload.get("template") is not None:
        card["template"] = _slug(payload["template"], "template")
    if payload.get("title") is not None:
        card["title"] = _text(payload["title"], "title", 200)
    items = payload.get("items")
    if not isinstance(items, list) or not items:
        _fail("invalid_items", "items", "must be a non-empty list")
    if len(items) > MAX_ITEMS:
        _fail("too_many", "items", f"must have at most {MAX_ITEMS} entries")
    card["items"] = [_validate_item(item, f"items[{i}]") for i, item in enumerate(items)]
    return card


def validate_layout(layout, path="layout"):
    """Return a normalised layout dict (every slot present) or raise CardError."""
    _object(layout, path)
    _check_keys(layout, set(LAYOUT_SLOTS) | {"style", "badges"}, path)
    if layout.get("style") not in LAYOUT_STYLES:
        _fail("wrong_value", f"{path}.style", f"must be one of {', '.join(LAYOUT_STYLES)}")
    out = {"style": layout["style"]}
    for slot, element in LAYOUT_SLOTS.items():
        value = layout.get(slot)
        if value not in (None, element):
            _fail("wrong_value", f"{path}.{slot}", f"must be {element!r} or null")
        out[slot] = value
    if out["title"] is None:
        _fail("missing_field", f"{path}.title", "is required: every card shows its title")
    badges = _list(layout.get("badges") or [], f"{path}.badges", len(LAYOUT_BADGES))
    for i, badge in enumerate(badges):
        if badge not in LAYOUT_BADGES or badge in badges[:i]:
            _fail("wrong_value", f"{path}.badges[{i}]", "must be price or rating, each once")
    out["badges"] = list(badges)
    return out


def validate_template(template):
    """Check a card template (as staff edit it in the admin); return a normalised copy."""
    _object(template, "template")
    _check_keys(template, TEMPLATE_KEYS, "template")
    version = template.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        _fail("wrong_type", "version", "must be a positive integer")
    defaults = _list(template.get("default_actions") or [], "default_actions", MAX_ACTIONS)
    out = {
        "name": _slug(template.get("name"), "name"),
        "result_type": _slug(template.get("result_type"), "result_type"),
        "version": version,
        "description": _text(template.get("description", ""), "description", 500),
        "layout": validate_layout(template.get("layout")),
        "default_actions": _validate_actions(defaults, "default_actions"),
    }
    if template.get("sample") is not None:
        out["sample"] = validate_card(template["sample"])
    return out


SEED_BY_NAME = {t["name"]: t for t in SEED_TEMPLATES}


def _usable(template):
    # A template staff broke in the admin counts as missing rather than breaking every card.
    if not isinstance(template, dict):
        return None
    try:
        return validate_template({k: v for k, v in template.items() if k != "sample"})
    except CardError:
        return None


def resolve_layout(result_type, template_name=None, lookup=None):
    """Pick the layout for a result and return the sealed copy to store with the message.

    Order: the named template, then the type's default template, then generic_list; the
    last two fall back to the seeded copy when `lookup` no longer has them.
    """
    lookup = lookup or (lambda name: None)
    default_name = DEFAULT_LAYOUT_FOR_TYPE.get(result_type, result_type)
    candidates = [(template_name, False), (default_name, True), (GENERIC_TEMPLATE, True)]
    for name, seeded in candidates:
        if not name:
            continue
        template = _usable(lookup(name)) or (seeded and _usable(SEED_BY_NAME.get(name)))
        if template:
            return copy.deepcopy(
                {
                    "template": template["name"],
                    "version": template["version"],
                    "requested": template_name,
                    "layout": template["layout"],
                    "default_actions": template["default_actions"],
                }
            )
    raise AssertionError("the seeded generic_list template is always usable")


# ---- rendering ---------------------------------------------------------------------------

CURRENCY_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "JPY": "¥", "INR": "₹", "KRW": "₩"}


def format_price(price):
    """Return a price as display text, e.g. "€129 / night"."""
    amount = price["amount"]
    digits = 0 if float(amount).is_integer() else 2
    number = f"{abs(amount):,.{digits}f}"
    currency = price.get("currency")
    symbol = CURRENCY_SYMBOLS.get(currency)
    text = f"{symbol}{number}" if symbol else f"{number} {currency or ''}".strip()
    if amount < 0:
        text = f"-{text}"
    if price.get("period"):
        text += f" / {price['period']}"
    return text


def _change_element(change):
    value, percent = change.get("value"), change.get("percent")
    basis = value if value is not None else percent
    direction = "up" if basis > 0 else "down" if basis < 0 else "flat"
    parts = []
    if value is not None:
        parts.append(f"{value:+,.2f}")
    if percent is not None:
        parts.append(f"({percent:+.2f}%)" if value is not None else f"{percent:+.2f}%")
    return {"kind": "change", "direction": direction, "text": " ".join(parts), **change}


def sparkline_points(values, width=100, height=24, pad=2):
    """Return SVG polyline points for `values` scaled into a width x height box."""
    if len(values) == 1:
        values = values * 2  # one point draws as a flat line across the box
    low, high = min(values), max(values)
    step = width / (len(values) - 1)
    points = []
    for i, v in enumerate(values):
        # A flat series has no range to scale by; draw it through the middle.
        y = height / 2 if high == low else pad + (high - v) / (high - low) * (height - 2 * pad)
        points.append(f"{round(i * step, 2):g},{round(y, 2):g}")
    return " ".join(points)


def _actions(item, sealed, index, outcomes):
    own = {a["id"]: a for a in item.get("actions", [])}
    defaults = [own.pop(a["id"], a) for a in sealed.get("default_actions", [])]
    out = []
    for action in defaults + list(own.values()):
        outcome = (outcomes or {}).get(f"{index}:{action['id']}")
        out.append({**action, "outcome": copy.deepcopy(outcome) if outcome else None})
    return out


def item_elements(item, sealed, index, outcomes=None):
    """Apply a sealed layout to one item: the ordered list of typed elements to show."""
    layout = sealed["layout"]
    show = {slot for slot, element in layout.items() if element and slot != "style"}
    out = []
    if "media" in show and item.get("image"):
        out.append({"kind": "image", "url": item["image"]})
    out.append({"kind": "title", "text": item["title"], "url": item.get("url")})
    if "subtitle" in show and item.get("subtitle"):
        out.append({"kind": "subtitle", "text": item["subtitle"]})
    for badge in layout.get("badges", []):
        if badge == "price" and "price" in item:
            out.append({"kind": "price", "text": format_price(item["price"]), **item["price"]})
        if badge == "rating" and "rating" in item:
            rating = item["rating"]
            out.append({"kind": "rating", "value": rating, "label": f"{rating:g} out of 5"})
    if "change" in show and item.get("change"):
        out.append(_change_element(item["change"]))
    if "trend" in show and item.get("trend"):
        out.append({"kind": "trend", "values": item["trend"]})
    if "callouts" in show:
        out += [{"kind": "callout", **c} for c in item.get("callouts", [])]
    if "rows" in show and item.get("fields"):
        out.append({"kind": "rows", "rows": item["fields"]})
    if "chips" in show and item.get("chips"):
        out.append({"kind": "chips", "chips": item["chips"]})
    if "body" in show and item.get("text") and sealed.get("template") == EMAIL_DRAFT:
        # An email's body is shown as the plain text that is sent: rendered as Markdown, parts
        # of it (a link definition line, an HTML comment) would be mailed without being seen.
        out.append({"kind": "plain_text", "text": item["text"]})
    elif "body" in show and item.get("text"):
        out.append({"kind": "text", "markdown": item["text"]})
    actions = _actions(item, sealed, index, outcomes) if "actions" in show else []
    if actions:
        out.append({"kind": "actions", "actions": actions})
    return out


def render_card_json(card, sealed, outcomes=None):
    """Return the card as plain data for non-HTML clients: each item an ordered element list."""
    return {
        "type": card["type"],
        "title": card.get("title"),
        "template": sealed["template"],
        "version": sealed["version"],
        "style": sealed["layout"]["style"],
        "items": [
            {"index": i, "elements": item_elements(item, sealed, i, outcomes)}
            for i, item in enumerate(card["items"])
        ],
    }


def _stars_html(value, label):
    halves = round(value * 2)
    full, half = divmod(halves, 2)
    stars = ["on"] * full + ["half"] * half + ["off"] * (5 - full - half)
    return format_html(
        '<span class="rating" role="img" aria-label="{}">{}<span class="rating__value">{}</span>'
        "</span>",
        label,
        format_html_join("", '<span class="star star--{}">★</span>', ((s,) for s in stars)),
        f"{value:g}",
    )


def _sparkline_html(values):
    direction = "up" if values[-1] > values[0] else "down" if values[-1] < values[0] else "flat"
    return format_html(
        '<svg class="spark spark--{}" viewBox="0 0 100 24" preserveAspectRatio="none" '
        'role="img" aria-label="{}"><polyline points="{}"/></svg>',
        direction,
        f"Trend of {len(values)} points, from {values[0]:g} to {values[-1]:g}",
        sparkline_points(values),
    )


def _button_html(action, index):
    outcome = action["outcome"]
    classes = f"btn btn--{action['style']}" + (" is-done" if outcome else "")
    attrs = format_html(
        'type="button" class="{}" data-card-action="{}" data-item-index="{}"',
        classes,
        action["id"],
        index,
    )
    if action["once"]:
        attrs = format_html('{} data-once="true"', attrs)
    if outcome:
        # The action already ran: show what happened instead of offering it again.
        return format_html(
            '<button {} data-outcome="{}" disabled>{}</button>',
            attrs,
            str(outcome.get("status", "done")),
            str(outcome.get("label") or action["label"]),
        )
    return format_html("<button {}>{}</button>", attrs, action["label"])


def _element_html(el, index):
    kind = el["kind"]
    if kind == "price":
        return format_html('<span class="price">{}</span>', el["text"])
    if kind == "rating":
        return _stars_html(el["value"], el["label"])
    if kind == "subtitle":
        return format_html('<p class="card__subtitle">{}</p>', el["text"])
    if kind == "callout":
        return format_html('<p class="callout callout--{}">{}</p>', el["tone"], el["text"])
    if kind == "rows":
        rows = format_html_join(
            "", "<div><dt>{}</dt><dd>{}</dd></div>", ((r["label"], r["value"]) for r in el["rows"])
        )
        return format_html('<dl class="card__rows">{}</dl>', rows)
    if kind == "chips":
        chips = format_html_join("", '<li class="chip">{}</li>', ((c,) for c in el["chips"]))
        return format_html('<ul class="card__chips">{}</ul>', chips)
    if kind == "text":
        # render_markdown returns sanitised HTML, so it may go in unescaped.
        return format_html(
            '<div class="card__body">{}</div>', mark_safe(render_markdown(el["markdown"]))
        )
    if kind == "plain_text":
        return format_html('<div class="card__body pre-wrap">{}</div>', el["text"])
    if kind == "change":
        arrow = {"up": "▲", "down": "▼", "flat": "■"}[el["direction"]]
        return format_html(
            '<span class="change change--{}"><span aria-hidden="true">{}</span> {}</span>',
            el["direction"],
            arrow,
            el["text"],
        )
    if kind == "trend":
        return _sparkline_html(el["values"])
    if kind == "actions":
        buttons = mark_safe("".join(_button_html(a, index) for a in el["actions"]))
        return format_html('<div class="card__actions">{}</div>', buttons)
    raise ValueError(f"unknown element kind {kind!r}")


def _item_html(item, sealed, index, outcomes):
    elements = item_elements(item, sealed, index, outcomes)
    parts = {"image": "", "title": "", "badges": [], "metric": [], "rest": []}
    for el in elements:
        if el["kind"] == "image":
            parts["image"] = format_html(
                '<img class="card__media" src="{}" alt="" loading="lazy" referrerpolicy="no-referrer">',
                el["url"],
            )
        elif el["kind"] == "title":
            title = el["text"]
            if el["url"]:
                title = format_html(
                    '<a href="{}" target="_blank" rel="{}">{}</a>', el["url"], LINK_REL, title
                )
            parts["title"] = format_html('<h4 class="card__title">{}</h4>', title)
        elif el["kind"] in ("price", "rating"):
            parts["badges"].append(_element_html(el, index))
        elif el["kind"] in ("change", "trend"):
            parts["metric"].append(_element_html(el, index))
        elif el["kind"] == "subtitle":
            parts["title"] = format_html("{}{}", parts["title"], _element_html(el, index))
        else:
            parts["rest"].append(_element_html(el, index))
    badges = (
        format_html('<div class="card__badges">{}</div>', _join(parts["badges"]))
        if parts["badges"]
        else ""
    )
    metric = (
        format_html('<div class="card__metric">{}</div>', _join(parts["metric"]))
        if parts["metric"]
        else ""
    )
    return format_html(
        '<li class="card" data-item-index="{}">{}<div class="card__main"><div class="card__head">'
        '<div class="card__heading">{}</div>{}</div>{}{}</div></li>',
        index,
        parts["image"],
        parts["title"],
        badges,
        metric,
        _join(parts["rest"]),
    )


def _join(fragments):
    # Every fragment comes from format_html, so joining them keeps them safe.
    return mark_safe("".join(fragments))


def render_card_html(card, sealed, outcomes=None):
    """Render a validated card with its sealed layout to HTML; every string is escaped."""
    title = (
        format_html('<h3 class="cards__title">{}</h3>', card["title"]) if card.get("title") else ""
    )
    items = _join(_item_html(item, sealed, i, outcomes) for i, item in enumerate(card["items"]))
    return format_html(
        '<section class="cards cards--{}" data-card-type="{}" data-template="{}" '
        'data-template-version="{}">{}<ul class="cards__items">{}</ul></section>',
        sealed["layout"]["style"],
        card["type"],
        sealed["template"],
        sealed["version"],
        title,
        items,
    )
