"""LLM access for the agents: one client for any OpenAI-compatible endpoint,
an on-disk reply cache, a price table and (for tests only) scripted and replay
fakes. Every model object the agents see implements :class:`optimize.llm.client.Model`.
"""
