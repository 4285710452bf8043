"""`oracle` (privileged, an upper bound): runs the label's reference program and looks at the evidence it must inspect.

It is the only agent that reads the hidden label: it runs `label.reference_sql` through the sql tool, runs a
query on the label's inspect table filtered on the inspect filter (so its abstentions are valid), and answers
with the canonical answer of the reference program's result under the template's Answer spec. A reference
program longer than the sql tool accepts (a population guard that lists thousands of hidden evidence keys) is
not run when the label abstains: the oracle looks up the first key it lists instead, and abstains.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from pipeline.agents import register
from pipeline.agents.base import Agent, AgentContext
from pipeline.env.sqlcheck import MAX_QUERY_CHARS
from pipeline.env.verifier import required_pins
from pipeline.templates.answers import AnswerValue
from pipeline.templates.render import sql_literal


@register
class Oracle(Agent):
    name = "oracle"
    privileged = True

    def act(self, episode, context: AgentContext, seed: int) -> None:
        label = context.label
        if label is None:
            raise ValueError("the oracle reads the hidden label: run it with a privileged context")
        if label.inspect:
            self.sql(episode, inspect_query(label.inspect, context))
        too_long = len(label.reference_sql) > MAX_QUERY_CHARS
        if too_long and label.expected.value is None and (probe := first_evidence_key_query(label.reference_sql)):
            self.sql(episode, probe)
            self.answer(episode, AnswerValue(value=None, unit=label.expected.unit))
            return
        frame = self.sql(episode, label.reference_sql)
        self.answer(episode, self.canonical(frame, context))


def first_evidence_key_query(reference_sql: str) -> str | None:
    """`SELECT count(*) FROM <table> WHERE <key columns> IN (<first key>)` from the `evidence` CTE a guarded
    reference program starts with (None when it has none)."""
    tree = sqlglot.parse_one(reference_sql, dialect="duckdb")
    for cte in tree.find_all(exp.CTE):
        table, where = cte.this.find(exp.Table), cte.this.args.get("where")
        keys = where.find(exp.In) if cte.alias == "evidence" and where is not None else None
        if table is not None and keys is not None and keys.expressions:
            first = keys.expressions[0].sql(dialect="duckdb")
            return f"SELECT count(*) AS n FROM {table.name} WHERE {keys.this.sql(dialect='duckdb')} IN ({first})"
    return None


def inspect_query(inspect: dict, context: AgentContext) -> str:
    """`SELECT count(*) FROM <table> WHERE <each pinned column IN its values>`; a concept pin checks its
    name in the slot's vocabulary column."""
    conditions = []
    for pin in required_pins(inspect, context.template):
        values = inspect["filter"][pin.key]
        listed = ", ".join(sql_literal(v) for v in (values if isinstance(values, list) else [values]))
        if pin.column is not None:
            conditions.append(f"{pin.column} IN ({listed})")
        else:
            vocabulary = context.template.spec.slots[pin.key].vocabulary
            if vocabulary is None:  # required_pins pins a non-column key only for a slot with a vocabulary
                raise ValueError(f"slot {pin.key!r} has no vocabulary")
            table, column = vocabulary.split(".")
            conditions.append(f"EXISTS (SELECT 1 FROM {table} v WHERE v.{column} IN ({listed}))")
    return f"SELECT count(*) AS n FROM {inspect['table']} WHERE {' AND '.join(conditions) or 'TRUE'}"
