"""Issue 28 through a real bridge (the scripted backend, on a real daphne): an agent that answered
a message hears of its edit and answers again; named in a reply thread, it answers there."""

import pytest

from conversations import actions
from conversations.models import Delivery, Message
from tests.socket_helpers import agent_replies, start_bridge
from tests.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_edit_reaches_the_agent_that_answered_and_a_thread_gets_its_answer(
    alice, bob, channel, nova, server, tmp_path
):
    bridge = start_bridge(server, nova, tmp_path)
    try:
        question = actions.post_message(alice, channel, "What is 2+2?")
        wait_until(
            lambda: Delivery.objects.filter(message=question, acked_at__isnull=False).exists(),
            what="Nova's answer, acked",
        )
        actions.edit_message(alice, question, "What is 3+3?")
        answers = wait_until(
            lambda: [r.body for r in agent_replies(channel, nova)][1:],
            what="Nova's answer to the edit notice",
        )
        assert answers == ["Echo: alice edited their message: What is 3+3?"]

        # In a reply thread, Nova answers only when named, and there, not in the channel.
        actions.reply_in_thread(bob, question, "Six, surely")
        named = actions.reply_in_thread(bob, question, "@nova can you confirm?")
        thread = named.conversation
        reply = wait_until(lambda: agent_replies(thread, nova), what="Nova's answer in the thread")
        assert [r.body for r in reply] == ["Echo: @nova can you confirm?"]
        assert Message.objects.get(pk=question.pk).reply_count == 3
        assert len(agent_replies(channel, nova)) == 2  # nothing more in the channel
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output
