"""The platform-curated card templates: seed data for the template table and the fallbacks.

A layout maps slots to the item element they show (a missing slot is hidden); see
`artifacts.cards.LAYOUT_SLOTS` for the vocabulary.
"""

GENERIC_TEMPLATE = "generic_list"

SEED_TEMPLATES = [
    {
        "name": "hotels",
        "result_type": "hotels",
        "version": 1,
        "description": "Hotel search results with photo, nightly price, rating and amenities.",
        "layout": {
            "style": "list",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price", "rating"],
            "callouts": "callouts",
            "rows": "fields",
            "chips": "chips",
            "actions": "actions",
        },
        "sample": {
            "type": "hotels",
            "template": "hotels",
            "title": "Hotels in Lisbon, 14–17 Oct",
            "items": [
                {
                    "title": "Memmo Alfama",
                    "subtitle": "Alfama · 0.4 km from the centre",
                    "image": "https://images.example.com/hotels/memmo-alfama.jpg",
                    "url": "https://www.example.com/hotels/memmo-alfama",
                    "price": {"amount": 229, "currency": "EUR", "period": "night"},
                    "rating": 4.7,
                    "fields": [
                        {"label": "Check-in", "value": "15:00"},
                        {"label": "Check-out", "value": "12:00"},
                        {"label": "Cancellation", "value": "Free until 12 Oct"},
                    ],
                    "chips": ["Rooftop pool", "Wi-Fi", "Breakfast included"],
                    "callouts": [{"tone": "success", "text": "Free cancellation"}],
                    "actions": [
                        {"id": "book", "label": "Book", "style": "primary"},
                        {"id": "more_like_this", "label": "More like this"},
                    ],
                    "data": {"hotel_id": "lis-memmo-001"},
                },
                {
                    "title": "The Lumiares",
                    "subtitle": "Bairro Alto · 1.1 km from the centre",
                    "image": "https://images.example.com/hotels/the-lumiares.jpg",
                    "url": "https://www.example.com/hotels/the-lumiares",
                    "price": {"amount": 189.5, "currency": "EUR", "period": "night"},
                    "rating": 4.5,
                    "fields": [
                        {"label": "Check-in", "value": "14:00"},
                        {"label": "Check-out", "value": "11:00"},
                    ],
                    "chips": ["Kitchenette", "Wi-Fi"],
                    "callouts": [{"tone": "warning", "text": "Only 2 rooms left at this price"}],
                    "actions": [{"id": "book", "label": "Book", "style": "primary"}],
                },
            ],
        },
    },
    {
        "name": "flights",
        "result_type": "flights",
        "version": 1,
        "description": "Flight options with times, duration, stops and fare.",
        "layout": {
            "style": "list",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price"],
            "callouts": "callouts",
            "rows": "fields",
            "chips": "chips",
            "actions": "actions",
        },
        "sample": {
            "type": "flights",
            "title": "Lisbon → New York, Tue 14 Oct",
            "items": [
                {
                    "title": "TAP TP203 · LIS 10:25 → JFK 13:05",
                    "subtitle": "Nonstop · 7 h 40 min",
                    "price": {"amount": 612, "currency": "EUR"},
                    "fields": [
                        {"label": "Departure", "value": "Lisbon (LIS), Terminal 1"},
                        {"label": "Arrival", "value": "New York (JFK), Terminal 1"},
                        {"label": "Baggage", "value": "1 × 23 kg checked"},
                    ],
                    "chips": ["Economy", "Wi-Fi", "Meal"],
                    "actions": [{"id": "select", "label": "Select", "style": "primary"}],
                    "data": {"offer_id": "tp203-20251014-y"},
                },
                {
                    "title": "United UA65 · LIS 12:40 → EWR 15:55",
                    "subtitle": "Nonstop · 8 h 15 min",
                    "price": {"amount": 574, "currency": "EUR"},
                    "fields": [
                        {"label": "Departure", "value": "Lisbon (LIS), Terminal 1"},
                        {"label": "Arrival", "value": "Newark (EWR), Terminal C"},
                        {"label": "Baggage", "value": "Carry-on only"},
                    ],
                    "chips": ["Basic economy"],
                    "callouts": [{"tone": "info", "text": "Arrives at Newark, not JFK"}],
                    "actions": [{"id": "select", "label": "Select", "style": "primary"}],
                },
            ],
        },
    },
    {
        "name": "emails",
        "result_type": "emails",
        "version": 1,
        "description": "An inbox digest: sender, subject, snippet, labels.",
        "layout": {
            "style": "compact",
            "title": "title",
            "subtitle": "subtitle",
            "callouts": "callouts",
            "chips": "chips",
            "body": "text",
            "actions": "actions",
        },
        "sample": {
            "type": "emails",
            "title": "This morning's inbox: 3 need you",
            "items": [
                {
                    "title": "Q3 planning: numbers before Thursday?",
                    "subtitle": "Ana Costa · 08:12",
                    "chips": ["Work", "Finance"],
                    "callouts": [{"tone": "warning", "text": "Asks for a reply by Thursday"}],
                    "text": "Could you send me the **final Q3 numbers** before our Thursday call?",
                    "actions": [
                        {"id": "draft_reply", "label": "Draft reply", "style": "primary"},
                        {"id": "archive", "label": "Archive"},
                    ],
                    "data": {"message_id": "msg-18c2f0a1"},
                },
                {
                    "title": "Your invoice INV-2041 is ready",
                    "subtitle": "Billing · 07:40",
                    "chips": ["Receipts"],
                    "text": "Invoice for September: 49.00 EUR, paid by card ending 4242.",
                    "actions": [{"id": "archive", "label": "Archive"}],
                },
            ],
        },
    },
    {
        "name": "email_draft",
        "result_type": "email_draft",
        "version": 1,
        "description": "A drafted email for the user to send or keep as a draft.",
        "layout": {
            "style": "briefing",
            "title": "title",
            "subtitle": "subtitle",
            "callouts": "callouts",
            "rows": "fields",
            "body": "text",
            "actions": "actions",
        },
        "default_actions": [
            {"id": "send", "label": "Send", "style": "primary", "once": True},
            {"id": "save_draft", "label": "Save draft", "style": "default", "once": False},
        ],
        "sample": {
            "type": "email_draft",
            "items": [
                {
                    "title": "Re: Q3 planning: numbers before Thursday?",
                    "subtitle": "Reply to Ana Costa",
                    "fields": [
                        {"label": "To", "value": "ana.costa@example.com"},
                        {"label": "Cc", "value": "finance@example.com"},
                    ],
                    "text": "Hi Ana,\n\nThe final Q3 numbers are attached. Headline: revenue "
                    "+8% quarter on quarter.\n\nSee you Thursday,\nSam",
                    "data": {"thread_id": "thr-18c2f0a1"},
                }
            ],
        },
    },
    {
        "name": "stock_quotes",
        "result_type": "stock_quotes",
        "version": 1,
        "description": "Stock quotes with last price, day change and intraday trend.",
        "layout": {
            "style": "compact",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price"],
            "change": "change",
            "trend": "trend",
            "rows": "fields",
            "callouts": "callouts",
        },
        "sample": {
            "type": "stock_quotes",
            "title": "Your watchlist at 15:30",
            "items": [
                {
                    "title": "AAPL",
                    "subtitle": "Apple Inc. · NASDAQ",
                    "price": {"amount": 227.48, "currency": "USD"},
                    "change": {"value": 1.87, "percent": 0.83},
                    "trend": [225.6, 225.9, 226.4, 226.1, 226.8, 227.2, 227.0, 227.48],
                    "fields": [
                        {"label": "Open", "value": "225.61"},
                        {"label": "Day range", "value": "225.10 – 227.90"},
                        {"label": "Volume", "value": "38.2 M"},
                    ],
                },
                {
                    "title": "ASML",
                    "subtitle": "ASML Holding · Euronext Amsterdam",
                    "price": {"amount": 642.3, "currency": "EUR"},
                    "change": {"value": -12.4, "percent": -1.89},
                    "trend": [654.7, 651.2, 648.0, 649.5, 645.1, 643.8, 642.3],
                    "fields": [{"label": "Open", "value": "654.70"}],
                    "callouts": [{"tone": "danger", "text": "Down 6% this week"}],
                },
            ],
        },
    },
    {
        "name": "job_offers",
        "result_type": "job_offers",
        "version": 1,
        "description": "Job postings with company logo, salary, terms and skills.",
        "layout": {
            "style": "list",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price"],
            "callouts": "callouts",
            "rows": "fields",
            "chips": "chips",
            "actions": "actions",
        },
        "sample": {
            "type": "job_offers",
            "title": "New Python roles matching your profile",
            "items": [
                {
                    "title": "Senior Backend Engineer (Django)",
                    "subtitle": "Northwind Labs · Lisbon or remote (EU)",
                    "image": "https://images.example.com/logos/northwind.png",
                    "url": "https://jobs.example.com/northwind/senior-backend",
                    "price": {"amount": 72000, "currency": "EUR", "period": "year"},
                    "fields": [
                        {"label": "Contract", "value": "Permanent, full time"},
                        {"label": "Experience", "value": "5+ years"},
                        {"label": "Posted", "value": "2 days ago"},
                    ],
                    "chips": ["Python", "Django", "PostgreSQL", "Redis"],
                    "callouts": [{"tone": "success", "text": "Strong match: 9 of 10 skills"}],
                    "actions": [
                        {"id": "apply", "label": "Apply", "style": "primary"},
                        {"id": "save", "label": "Save"},
                    ],
                }
            ],
        },
    },
    {
        "name": "recipes",
        "result_type": "recipes",
        "version": 1,
        "description": "Recipes with photo, rating, timings and the method as text.",
        "layout": {
            "style": "grid",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["rating"],
            "rows": "fields",
            "chips": "chips",
            "body": "text",
            "actions": "actions",
        },
        "sample": {
            "type": "recipes",
            "title": "Quick dinners with what's in your fridge",
            "items": [
                {
                    "title": "Lemon garlic chickpea pasta",
                    "subtitle": "Vegetarian · 25 min",
                    "image": "https://images.example.com/recipes/chickpea-pasta.jpg",
                    "url": "https://recipes.example.com/lemon-garlic-chickpea-pasta",
                    "rating": 4.6,
                    "fields": [
                        {"label": "Time", "value": "25 min"},
                        {"label": "Serves", "value": 2},
                        {"label": "Calories", "value": "540 kcal"},
                    ],
                    "chips": ["Vegetarian", "One pot"],
                    "text": "1. Cook 200 g pasta.\n2. Fry garlic and chickpeas in olive oil.\n"
                    "3. Toss with lemon zest, juice and parmesan.",
                    "actions": [{"id": "add_to_shopping_list", "label": "Add to shopping list"}],
                }
            ],
        },
    },
    {
        "name": "daily_briefing",
        "result_type": "daily_briefing",
        "version": 1,
        "description": "A morning briefing made of sections: calendar, inbox, markets, weather.",
        "layout": {
            "style": "briefing",
            "title": "title",
            "subtitle": "subtitle",
            "change": "change",
            "trend": "trend",
            "callouts": "callouts",
            "rows": "fields",
            "body": "text",
            "actions": "actions",
        },
        "sample": {
            "type": "daily_briefing",
            "title": "Good morning, Sam: Tuesday 14 October",
            "items": [
                {
                    "title": "Today",
                    "subtitle": "3 meetings, first at 09:30",
                    "text": "- 09:30 **Standup**\n- 11:00 Design review with Ana\n"
                    "- 16:00 1:1 with Priya",
                    "callouts": [{"tone": "warning", "text": "11:00 overlaps with your dentist"}],
                },
                {
                    "title": "Inbox",
                    "subtitle": "12 new, 3 need a reply",
                    "text": "Ana is waiting for the *Q3 numbers*; billing sent invoice INV-2041.",
                    "actions": [{"id": "open_inbox", "label": "Show the 3"}],
                },
                {
                    "title": "Markets",
                    "subtitle": "Your portfolio",
                    "change": {"value": 412.5, "percent": 0.62},
                    "trend": [66100, 66240, 66180, 66390, 66512.5],
                },
                {
                    "title": "Weather",
                    "subtitle": "Lisbon: sunny, 17–24 °C",
                    "fields": [{"label": "Rain", "value": "0%"}, {"label": "UV", "value": "6"}],
                },
            ],
        },
    },
    {
        "name": "weather",
        "result_type": "weather",
        "version": 1,
        "description": "Current conditions and forecast with a temperature trend.",
        "layout": {
            "style": "compact",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "trend": "trend",
            "callouts": "callouts",
            "rows": "fields",
        },
        "sample": {
            "type": "weather",
            "items": [
                {
                    "title": "Lisbon: 21 °C, sunny",
                    "subtitle": "Tuesday · feels like 22 °C",
                    "image": "https://images.example.com/weather/sunny.png",
                    "trend": [16, 17, 19, 21, 23, 24, 23, 21, 19, 18],
                    "fields": [
                        {"label": "High / low", "value": "24 / 16 °C"},
                        {"label": "Wind", "value": "NW 14 km/h"},
                        {"label": "Humidity", "value": "48%"},
                        {"label": "UV index", "value": "6 (high)"},
                    ],
                    "callouts": [{"tone": "info", "text": "Sunscreen advised 12:00–16:00"}],
                }
            ],
        },
    },
    {
        "name": "calendar_events",
        "result_type": "calendar_events",
        "version": 1,
        "description": "Calendar events with time, place, attendees and RSVP buttons.",
        "layout": {
            "style": "compact",
            "title": "title",
            "subtitle": "subtitle",
            "callouts": "callouts",
            "rows": "fields",
            "chips": "chips",
            "actions": "actions",
        },
        "sample": {
            "type": "calendar_events",
            "title": "Tomorrow",
            "items": [
                {
                    "title": "Design review",
                    "subtitle": "Wed 15 Oct · 11:00–12:00",
                    "url": "https://calendar.example.com/event/8f2c",
                    "fields": [
                        {"label": "Where", "value": "Room Tejo / video call"},
                        {"label": "Organizer", "value": "Ana Costa"},
                        {"label": "Attendees", "value": "6 (4 accepted)"},
                    ],
                    "chips": ["Work"],
                    "callouts": [{"tone": "warning", "text": "Overlaps with Dentist (11:30)"}],
                    "actions": [
                        {"id": "accept", "label": "Accept", "style": "primary", "once": True},
                        {"id": "decline", "label": "Decline", "style": "danger", "once": True},
                    ],
                }
            ],
        },
    },
    {
        "name": "news",
        "result_type": "news",
        "version": 1,
        "description": "News stories with image, source and a short summary.",
        "layout": {
            "style": "list",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "chips": "chips",
            "body": "text",
            "actions": "actions",
        },
        "sample": {
            "type": "news",
            "title": "Top stories on European energy",
            "items": [
                {
                    "title": "EU agrees new grid interconnection targets",
                    "subtitle": "Reuters · 2 h ago",
                    "image": "https://images.example.com/news/grid.jpg",
                    "url": "https://news.example.com/eu-grid-targets",
                    "chips": ["Energy", "EU"],
                    "text": "Member states commit to **15% cross-border capacity** by 2030.",
                    "actions": [{"id": "summarise", "label": "Summarise in depth"}],
                }
            ],
        },
    },
    {
        "name": "products",
        "result_type": "products",
        "version": 1,
        "description": "Shopping results with photo, price, rating and price changes.",
        "layout": {
            "style": "grid",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price", "rating"],
            "change": "change",
            "callouts": "callouts",
            "chips": "chips",
            "actions": "actions",
        },
        "sample": {
            "type": "products",
            "title": "Noise-cancelling headphones under 300 EUR",
            "items": [
                {
                    "title": "Sony WH-1000XM5",
                    "subtitle": "Black · over-ear",
                    "image": "https://images.example.com/products/wh1000xm5.jpg",
                    "url": "https://shop.example.com/p/sony-wh1000xm5",
                    "price": {"amount": 279.99, "currency": "EUR"},
                    "rating": 4.6,
                    "change": {"value": -70, "percent": -20},
                    "chips": ["Bluetooth 5.2", "30 h battery"],
                    "callouts": [{"tone": "success", "text": "Lowest price in 90 days"}],
                    "actions": [
                        {"id": "buy", "label": "Buy", "style": "primary"},
                        {"id": "watch_price", "label": "Watch price"},
                    ],
                }
            ],
        },
    },
    {
        "name": GENERIC_TEMPLATE,
        "result_type": "generic_list",
        "version": 1,
        "description": "Shows every element an item carries; the fallback for unknown types.",
        "layout": {
            "style": "list",
            "media": "image",
            "title": "title",
            "subtitle": "subtitle",
            "badges": ["price", "rating"],
            "change": "change",
            "trend": "trend",
            "callouts": "callouts",
            "rows": "fields",
            "chips": "chips",
            "body": "text",
            "actions": "actions",
        },
        "sample": {
            "type": "generic_list",
            "title": "Results",
            "items": [
                {
                    "title": "Coworking space in Cais do Sodré",
                    "subtitle": "Open until 22:00",
                    "url": "https://www.example.com/coworking/cais",
                    "price": {"amount": 18, "currency": "EUR", "period": "day"},
                    "rating": 4.2,
                    "fields": [{"label": "Address", "value": "Rua Nova do Carvalho 12"}],
                    "chips": ["Wi-Fi", "Coffee"],
                    "text": "Quiet floor upstairs; phone booths bookable.",
                    "actions": [{"id": "more", "label": "Tell me more"}],
                }
            ],
        },
    },
]

# Result types (and common aliases agents use) -> the template to fall back to.
DEFAULT_LAYOUT_FOR_TYPE = {
    **{t["result_type"]: t["name"] for t in SEED_TEMPLATES},
    "hotel": "hotels",
    "flight": "flights",
    "email": "emails",
    "inbox": "emails",
    "stocks": "stock_quotes",
    "stock_quote": "stock_quotes",
    "jobs": "job_offers",
    "recipe": "recipes",
    "briefing": "daily_briefing",
    "forecast": "weather",
    "events": "calendar_events",
    "calendar": "calendar_events",
    "articles": "news",
    "shopping": "products",
}
