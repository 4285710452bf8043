"""`literal`: runs the clean gold SQL rendered with the question's slots on the episode's data and answers with it
(of several rows for one value, the first: `first_reading`).

It shows which noise a literal reader already survives (the gold program finds nothing and it answers NULL)
and which traps catch it (the gold program still finds a plausible but unsupported answer).
"""

from __future__ import annotations

from pipeline.agents import register
from pipeline.agents.base import Agent, AgentContext


@register
class Literal(Agent):
    name = "literal"

    def act(self, episode, context: AgentContext, seed: int) -> None:
        frame = self.sql(episode, context.render(context.template.gold_sql))
        self.answer(episode, self.canonical(frame, context, careless=True))
