"""Tell PostgreSQL's planner that a conversation is long (about 500 messages), whatever the
average of its statistics says.

ANALYZE estimates one conversation's length as the average over all conversations. Most are
short (direct messages, side threads), so the average is a few messages; but the conversations
read most are the busy ones. Under that estimate a page of history (and an agent's history
window) is cheapest read by fetching the whole conversation and sorting it, which for a busy
channel means every message it ever had, on every read (tests/conversations/test_read_plans.py).
With a long conversation assumed, the planner walks the message_history index from the page's
edge and stops after the page. Reads of short conversations cost the same either way.

``n_distinct`` set on the column outlasts later ANALYZEs; a negative value is a fraction of the
table's rows: -0.002 means one conversation per 500 messages."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("conversations", "0010_message_indexes_within_a_conversation")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE conversations_message ALTER COLUMN conversation_id"
            " SET (n_distinct = -0.002)",
            "ALTER TABLE conversations_message ALTER COLUMN conversation_id RESET (n_distinct)",
        )
    ]
