"""What reading in a busy conversation costs as the conversation grows, in one process.

A page of history, a person's post and an agent's claim should cost what they return, not what
the conversation holds. This builds a channel with a long history (each message answered: a
finished turn and an acked delivery) among many short conversations, as in any workspace, then
times each operation through the product's own code (the REST endpoint via Django's test client;
the gateway as a socket's thread calls it). Wall time, so PostgreSQL's share counts; median of
--count runs after warming the prepared statements.

    .venv/bin/python -m bench.history                   # 20,000 messages, 2,000 short ones
    .venv/bin/python -m bench.history --messages 5000 --short 500

Same database and settings as pipeline.py (the bench database is recreated).
"""

import argparse
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
    args = parser.parse_args()
    pipeline.setup_database()
    pipeline.setup_django()
    pipeline.clear_redis()

    from django.test import Client
    from django.utils import timezone

    from agents import gateway
    from conversations import actions
    from conversations.models import Conversation, Delivery, Message, TurnDecision

    scene = pipeline.create_scene(["busy"])
    agent, channel, _ = scene.phases["busy"]
    person = scene.user
    busy = Message.objects.bulk_create(
        Message(conversation=channel, author_user=person, body=f"busy {i}")
        for i in range(args.messages)
    )
    now = timezone.now()
    queue = [{"agent_id": str(agent.id), "reason": "mention"}]
    TurnDecision.objects.bulk_create(
        TurnDecision(conversation=channel, message=m, rule="mention", queue=queue, finished_at=now)
        for m in busy
    )
    Delivery.objects.bulk_create(
        Delivery(agent=agent, workspace_id=channel.workspace_id, message=m, acked_at=now)
        for m in busy
    )
    short = Conversation.objects.bulk_create(
        Conversation(workspace=scene.workspace, kind="direct", created_by=person)
        for _ in range(args.short)
    )
    Message.objects.bulk_create(
        Message(conversation=c, author_user=person, body="hi") for c in short for _ in range(3)
    )
    pipeline.analyze()

    client = Client(HTTP_AUTHORIZATION=f"Bearer {scene.person_token}")
    url = f"/api/v1/conversations/{channel.id}/messages/"
    middle = busy[len(busy) // 2]

    def page(i):
        assert client.get(url + "?limit=50").status_code == 200

    def page_before(i):
        assert client.get(url + f"?limit=50&before={middle.id}").status_code == 200

    def person_post(i):
        response = client.post(url, {"body": f"thanks {i}"}, content_type="application/json")
        assert response.status_code == 201

    def answer_and_reply(i):
        # An agent's answer (with its client ref, as a bridge posts), then a person's post.
        actions.post_message(agent, channel, f"answer {i}", client_ref=f"ref-{i}")
        person_post(i)

    claimed = []

    def claim(i):
        (frame,) = gateway.claim_work(agent, "bench-connection", {"message": 1})
        claimed.append(frame["id"])

    def ack(i):
        gateway.ack_and_claim(agent, "bench-connection", [claimed[i]], {})

    figures = {}
    for name, operation in (("newest page (REST, 50)", page), ("page before (REST)", page_before)):
        median_ms(operation, 6)  # warm: prepared statements take their generic plans
        figures[name] = median_ms(operation, args.count)
    # Each person's post after an agent's answer; then its delivery claimed and acked.
    answer_times = []
    claim_times, ack_times = [], []
    for i in range(args.count + 6):
        actions.post_message(agent, channel, f"answer {i}", client_ref=f"ref-{i}")
        start = time.perf_counter()
        person_post(i)
        answer_times.append((time.perf_counter() - start) * 1000)
        time.sleep(0.005)  # the post's wake-up leaves first
        Delivery.objects.filter(agent=agent, claimed_by=None).exclude(
            message__body=f"thanks {i}"
        ).update(acked_at=now)
        start = time.perf_counter()
        claim(len(claimed))
        claim_times.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        ack(len(claimed) - 1)
        ack_times.append((time.perf_counter() - start) * 1000)
    figures["person's post after an agent's"] = statistics.median(answer_times[6:])
    figures["claim of its delivery, with payload"] = statistics.median(claim_times[6:])
    figures["ack (finishes the turn)"] = statistics.median(ack_times[6:])

    print(
        f"A channel of {args.messages} messages among {args.short} short conversations; "
        f"wall time, median of {args.count}:"
    )
    for name, ms in figures.items():
        print(f"  {name:38s} {ms:7.2f} ms")


if __name__ == "__main__":
    main()
