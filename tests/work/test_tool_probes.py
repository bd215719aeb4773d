"""Probes of the tool call path: inputs an agent (or a prompt it read) can shape."""

import time
import uuid

from work.models import Risk
from work.tools.calls import schema_problem
from work.tools.registry import Tool

# An outside MCP server's input schema: a pattern that backtracks, and pattern properties.
OUTSIDE_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
    "patternProperties": {"^x_(a+)+$": {"type": "string"}},
    "additionalProperties": False,
    "required": ["q"],
}


def outside_tool(schema: dict) -> Tool:
    return Tool(
        name="search__find", description="Find.", input_schema=schema, risk=Risk.READ,
        handler=lambda context, arguments: "", platform=False, workspace_id=uuid.uuid4(),
    )  # fmt: skip


def test_an_outside_schemas_regular_expressions_are_not_run_on_the_arguments():
    # Run, "^(a+)+$" takes twice as long with each "a": 25 of them, seconds of a thread holding
    # the interpreter; 40, hours. The outside server checks its own patterns.
    tool = outside_tool(OUTSIDE_SCHEMA)
    started = time.monotonic()
    assert schema_problem(tool, {"q": "a" * 25 + "!", "x_" + "a" * 25 + "!": "v"}) is None
    assert time.monotonic() - started < 0.3
    # The rest of the schema still holds.
    assert "'q' is a required property" in schema_problem(tool, {})
    assert "is not of type 'string'" in schema_problem(tool, {"q": 1})


def test_a_refusal_quotes_a_huge_value_only_in_part():
    """jsonschema's words quote the value ("'xxx…' is too long"): a 500 KB argument made a
    500 KB error, stored with the call, told to the model and shown on its pages."""
    tool = outside_tool({"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}}})
    problem = schema_problem(tool, {"q": "x" * 500_000})
    assert problem.startswith("The arguments for search__find do not fit its input schema: q: '")
    assert problem.endswith("…") and len(problem) < 700
