"""The demo's two scripted agents, Scout and Nova: what each says and does for the prompts the
demo suggests (their bridges' scripted tables), and the same words for the finished examples
``seed_demo`` puts in #general, so the sample is exactly what trying a prompt does again.

Each table is the scripted backend's options (bridge/agntchat_bridge/backends/scripted.py):
an exact prompt → a reply or steps, ``rules`` (regex → reply) for card clicks, whose wording
names the person who clicked. Words that would wake the other agent by its capability are
avoided in the agents' own posts: only a mention (@scout) hands a turn on.
"""

# The prompts a person tries (also in the intro message).
THREAD_PROMPT = "@scout check the launch date with Nova"
CARD_PROMPT = "@scout compare three venues"
ARTIFACT_PROMPT = "@nova draft the launch note"
TASK_PROMPT = "/task @nova prepare the launch checklist"
TASK_INSTRUCTIONS = "prepare the launch checklist"  # what /task @nova … hands Nova

# The side thread: Scout asks Nova aside, Nova answers Scout, Scout resolves it.
THREAD_OPENER = (
    'Checking with Nova in a side thread. <dm target="Nova">Is Thursday 14 May free for the '
    "launch?</dm>"
)
THREAD_QUESTION = "Is Thursday 14 May free for the launch?"
THREAD_ANSWER = "@scout Yes: 14 May is free, no holidays or other launches that week."
THREAD_SUMMARY = "Launch date confirmed: Thursday 14 May is free (checked with Nova)."

VENUES_CARD = {
    "template": "hotels",
    "title": "Three venues for the launch",
    "items": [
        {
            "title": "Harbour Hall",
            "subtitle": "Waterfront · seats 120",
            "price": {"amount": 2400, "currency": "EUR", "period": "evening"},
            "rating": 4.7,
            "chips": ["Stage", "Screen", "Near the station"],
            "actions": [
                {"id": "book", "label": "Book", "style": "primary", "once": True},
                {"id": "details", "label": "More details"},
            ],
        },
        {
            "title": "The Glasshouse",
            "subtitle": "Rooftop · seats 80",
            "price": {"amount": 1900, "currency": "EUR", "period": "evening"},
            "rating": 4.5,
            "chips": ["Daylight", "Terrace"],
            "actions": [
                {"id": "book", "label": "Book", "style": "primary", "once": True},
                {"id": "details", "label": "More details"},
            ],
        },
        {
            "title": "Old Print Works",
            "subtitle": "Industrial loft · seats 150",
            "price": {"amount": 2800, "currency": "EUR", "period": "evening"},
            "rating": 4.3,
            "chips": ["Large", "Bar"],
            "actions": [
                {"id": "book", "label": "Book", "style": "primary", "once": True},
                {"id": "details", "label": "More details"},
            ],
        },
    ],
}
BOOKED = "Booked: the venue is held for Thursday 14 May, and the confirmation is on its way."
DETAILS = "It has a stage, a screen and a bar; doors open at 18:00 and it is close to a station."

NOTE_TITLE = "Launch note"
NOTE_V1 = (
    "# Launch note\n\nWe are launching the new workspace app.\n\n"
    "- Where: to be decided\n- When: to be decided\n"
)
NOTE_V2 = (
    "# Launch note\n\nOn **Thursday 14 May** we launch the new workspace app, where people "
    "and AI agents work in the same conversations.\n\n"
    "- Where: Harbour Hall, on the waterfront\n- When: 18:00, doors open at 17:30\n"
    "- Who: the whole team, our first customers and the press\n"
)
NOTE_CHANGE = "Adds the date, the venue and who is coming."
NOTE_REPLY = "Published **Launch note**, then a second version with the date and venue: open it to compare v1 and v2."

TASK_STEPS = [
    "Reading the launch note",
    "Listing what has to happen before 14 May",
    "Ordering the steps by date",
]
TASK_RESULT = (
    "Launch checklist ready:\n\n1. Confirm Harbour Hall (done)\n2. Send invitations by 30 April\n"
    "3. Final run-through on 13 May\n4. Publish the launch note on 14 May at 18:00"
)

SILENT = [{"text": ""}]  # a turn that says nothing (the bridge posts no empty reply)

SCOUT = {
    "name": "Scout",
    "handle": "scout",
    "role": "demo scout",
    "capabilities": ["research"],
    "options": {
        "delay_ms": 400,
        "word_ms": 40,  # written a word at a time, as a model streams: Stop can be tried
        "default": (
            "I am Scout, a scripted demo agent: I know the prompts in the intro message. "
            "Try “" + THREAD_PROMPT + "” or “" + CARD_PROMPT + "”."
        ),
        "replies": {
            THREAD_PROMPT: [{"text": THREAD_OPENER}],
            CARD_PROMPT: [{"tool": "card_post", "input": VENUES_CARD}, *SILENT],
            # Nova's answer in the side thread: Scout brings it back and is done there.
            THREAD_ANSWER: [
                {"tool": "thread_resolve", "input": {"summary": THREAD_SUMMARY}},
                {"tool": "done"},
                *SILENT,
            ],
        },
        "rules": [["chose “Book” on", BOOKED], ["chose “More details” on", DETAILS]],
    },
}

NOVA = {
    "name": "Nova",
    "handle": "nova",
    "role": "demo writer",
    "capabilities": ["drafting"],
    "options": {
        "delay_ms": 400,
        "word_ms": 40,  # written a word at a time, as a model streams: Stop can be tried
        "default": (
            "I am Nova, a scripted demo agent: try “"
            + ARTIFACT_PROMPT
            + "” or “"
            + TASK_PROMPT
            + "”."
        ),
        "replies": {
            THREAD_QUESTION: [{"text": THREAD_ANSWER}],
            ARTIFACT_PROMPT: [
                {
                    "tool": "artifact_publish",
                    "input": {"title": NOTE_TITLE, "kind": "markdown", "content": NOTE_V1},
                },
                {
                    "tool": "artifact_update",
                    "input": {
                        "artifact_id": "{result.artifact_id}",
                        "content": NOTE_V2,
                        "note": NOTE_CHANGE,
                    },
                },
                {"text": NOTE_REPLY},
            ],
            TASK_INSTRUCTIONS: [
                *({"progress": step, "sleep_ms": 1200} for step in TASK_STEPS),
                {"text": TASK_RESULT},
            ],
        },
    },
}

AGENTS = (SCOUT, NOVA)

INTRO = (
    "**Welcome to the agntchat demo.** Scout and Nova are two scripted demo agents, each "
    "running on a real bridge. Above is a finished example of what they do; try it yourself "
    "by sending any of these:\n\n"
    f"- `{THREAD_PROMPT}`: Scout asks Nova in a **side thread** and resolves it (open the card)\n"
    f"- `{CARD_PROMPT}`: a **result card**; its buttons reach Scout\n"
    f"- `{ARTIFACT_PROMPT}`: an **artifact** published, then revised to v2\n"
    f"- `{TASK_PROMPT}`: a **task** with live progress (see Tasks)"
)
WELCOME = (
    "Welcome to the demo team. Below: one finished example of each thing Scout and Nova can "
    "do; the last message says how to try them."
)
