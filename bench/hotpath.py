"""CPU per operation on the message path, in one process: a post, a page of history, a one-item
claim, its ack, an agent's answer.

The end-to-end bench (bench/pipeline.py) measures what a user sees, but on a shared machine its
figures move from one run to the next by more than a single cut on the hot path is worth. CPU
time of one operation repeated in one process, with nothing else running in it, moves less
(still enough to alternate old and new code: bench/mechanisms.py): use this to decide whether a
cut of a millisecond pays, pipeline.py to report.

    .venv/bin/python -m bench.hotpath            # best of 5 rounds of 300 each
    .venv/bin/python -m bench.hotpath --rounds 3 --count 100

Same database and settings as pipeline.py (the bench database is recreated). A post goes
through Django's whole HTTP handling (middleware, DRF, the view) via the test client, without
a socket; claims and acks call the gateway as a socket's thread would.
"""

import argparse
import json
import time

from bench import pipeline


def best_cpu_ms(operation, rounds: int, count: int) -> float:
    """The lowest mean CPU time of OPERATION over ROUNDS rounds of COUNT calls, in ms."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for i in range(count):
            operation(i)
        best = min(best, (time.process_time() - start) / count * 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="the figures as one line of JSON")
    args = parser.parse_args()
    pipeline.setup_database()
    pipeline.setup_django()
    pipeline.clear_redis()

    from django.test import Client

    from conversations.access import access_conversation
    from conversations.actions import post_message
    from conversations.models import Delivery
    from work import gateway

    scene = pipeline.create_scene(["hot"])
    agent, conversation, _ = scene.phases["hot"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {scene.person_token}")
    path = f"/api/v1/conversations/{conversation.id}/messages/"

    def post(i):
        response = client.post(path, {"body": f"hello {i}"}, content_type="application/json")
        assert response.status_code == 201, response.content

    def bare(i):
        response = client.post("/bench/baseline/", {"body": "x"}, content_type="application/json")
        assert response.status_code == 201, response.content

    for i in range(50):  # warm: compiled statements, prepared statements, imports
        post(i)
        bare(i)
    Delivery.objects.filter(agent=agent).update(acked_at="2026-01-01T00:00:00Z")
    post_ms = best_cpu_ms(post, args.rounds, args.count)
    bare_ms = best_cpu_ms(bare, args.rounds, args.count)

    def history(i):  # what a browser or client reads on opening the conversation
        response = client.get(path, {"limit": 50})
        assert response.status_code == 200 and len(response.json()["results"]) == 50

    history_ms = best_cpu_ms(history, args.rounds, args.count // 3)

    # One queued item per claim, as at low rates: post, claim it, ack it.
    claimed = []

    def claim(i):
        (frame,) = gateway.claim_work(agent, "hot-connection", {"message": 8})
        claimed.append(frame["id"])

    def ack(i):
        gateway.write_bare_acks([claimed[i]], "hot-connection")

    claim_ms = ack_ms = float("inf")
    for _ in range(args.rounds):
        Delivery.objects.filter(agent=agent).update(acked_at="2026-01-01T00:00:00Z")
        claimed.clear()
        claim_round = ack_round = 0.0
        for i in range(args.count):
            post(i)
            # CPU time counts every thread: let the post's wake-up leave (the event publisher's
            # thread) before timing the claim, or its CPU is counted as the claim's.
            time.sleep(0.005)
            start = time.process_time()
            claim(i)
            claim_round += time.process_time() - start
            start = time.process_time()
            ack(i)
            ack_round += time.process_time() - start
        claim_ms = min(claim_ms, claim_round / args.count * 1000)
        ack_ms = min(ack_ms, ack_round / args.count * 1000)

    # An agent's answer, as a bridge gives it: claim the person's message, post the reply with
    # the item's ref through the agent's access check, ack.
    def answer(i):
        (frame,) = gateway.claim_work(agent, "hot-connection", {"message": 8})
        where = access_conversation(agent, conversation.id)
        post_message(agent, where, f"re {i}", client_ref=f"work:{frame['id']}")
        assert gateway.ack_work(frame["id"], "hot-connection")

    answer_ms = float("inf")
    for _ in range(args.rounds):
        Delivery.objects.filter(agent=agent).update(acked_at="2026-01-01T00:00:00Z")
        answer_round = 0.0
        for i in range(args.count):
            post(i)
            time.sleep(0.005)  # as above: the post's wake-up leaves first
            start = time.process_time()
            answer(i)
            answer_round += time.process_time() - start
            time.sleep(0.005)  # and the answer's events
        answer_ms = min(answer_ms, answer_round / args.count * 1000)

    if args.json:
        figures = {
            "bare_ms": bare_ms,
            "post_ms": post_ms,
            "history_ms": history_ms,
            "claim_ms": claim_ms,
            "ack_ms": ack_ms,
            "answer_ms": answer_ms,
        }
        print(json.dumps(figures))
        return
    print(f"CPU per operation, best of {args.rounds} rounds of {args.count}:")
    print(f"  bare DRF insert (test client)   {bare_ms:6.2f} ms")
    print(f"  post, person in a channel       {post_ms:6.2f} ms")
    print(f"  GET a page of 50 messages       {history_ms:6.2f} ms")
    print(f"  claim of one item with payload  {claim_ms:6.2f} ms")
    print(f"  ack of one item                 {ack_ms:6.2f} ms")
    print(f"  agent's answer: claim, post, ack {answer_ms:5.2f} ms")


if __name__ == "__main__":
    main()
