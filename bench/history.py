"""What reading in a busy conversation costs as the conversation grows, in one process.

A page of history, the sidebar, a person's post and an agent's claim should cost what they
return, not what the conversation (or the workspace) holds. This builds a channel with a long history (each message answered: a
finished turn and an acked delivery) among many short conversations, as in any workspace, then
times each operation through the product's own code (the REST endpoint via Django's test client;
the gateway as a socket's thread calls it). Wall time, so PostgreSQL's share counts; median of
--count runs after warming the prepared statements.

    .venv/bin/python -m bench.history                   # 20,000 messages, 2,000 short ones
    .venv/bin/python -m bench.history --messages 5000 --short 500

Same database and settings as pipeline.py (the bench database is recreated).
"""

import argparse
import json
import statistics
import time

from bench import pipeline


def median_ms(operation, count: int) -> float:
    times = []
    for i in range(count):
        start = time.perf_counter()
        operation(i)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--short", type=int, default=2000)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="the figures as one line of JSON")
    args = parser.parse_args()
    pipeline.setup_database()
    pipeline.setup_django()
    pipeline.clear_redis()

    from django.test import Client

    from conversations import actions
    from conversations.models import Message
    from tests.plans import fill_long_history
    from work import gateway

    scene = pipeline.create_scene(["busy"])
    agent, channel, _ = scene.phases["busy"]
    person = scene.user
    fill_long_history(person, channel, agent, args.messages, args.short)
    pipeline.analyze()

    client = Client(HTTP_AUTHORIZATION=f"Bearer {scene.person_token}")
    url = f"/api/v1/conversations/{channel.id}/messages/"
    middle = Message.objects.get(conversation=channel, body=f"busy {args.messages // 2}")

    browser = Client()
    browser.force_login(person)
    sidebar_url = f"/app/w/{channel.workspace_id}/sidebar/"

    def page(i):
        assert client.get(url + "?limit=50").status_code == 200

    def sidebar(i):
        assert browser.get(sidebar_url).status_code == 200

    def page_before(i):
        assert client.get(url + f"?limit=50&before={middle.id}").status_code == 200

    def person_post():
        response = client.post(url, {"body": "thanks"}, content_type="application/json")
        assert response.status_code == 201

    def claim():
        (frame,) = gateway.claim_work(agent, "bench-connection", {"message": 1})
        return frame["id"]

    figures = {}
    for name, operation in (
        ("newest page (REST, 50)", page),
        ("page before (REST)", page_before),
        ("sidebar (drawn on every page)", sidebar),
    ):
        median_ms(operation, 6)  # warm: prepared statements take their generic plans
        figures[name] = median_ms(operation, args.count)
    # Each time: an agent's answer (with its client ref, as a bridge posts), a person's post
    # after it, then the delivery of that post claimed and acked.
    times = {"person's post after an agent's": [], "claim of its delivery, with payload": []}
    times["ack (finishes the turn)"] = []
    for i in range(args.count + 6):
        actions.post_message(agent, channel, f"answer {i}", client_ref=f"ref-{i}")
        start = time.perf_counter()
        person_post()
        posted = time.perf_counter()
        time.sleep(0.005)  # the post's wake-up leaves first
        start_claim = time.perf_counter()
        delivery_id = claim()
        claimed = time.perf_counter()
        gateway.write_bare_acks([delivery_id], "bench-connection")
        acked = time.perf_counter()
        if i >= 6:  # warm-up
            for name, ms in zip(
                times,
                ((posted - start) * 1000, (claimed - start_claim) * 1000, (acked - claimed) * 1000),
                strict=True,
            ):
                times[name].append(ms)
    figures.update({name: statistics.median(values) for name, values in times.items()})

    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"A channel of {args.messages} messages among {args.short} short conversations; "
        f"wall time, median of {args.count}:"
    )
    for name, ms in figures.items():
        print(f"  {name:38s} {ms:7.2f} ms")


if __name__ == "__main__":
    main()
