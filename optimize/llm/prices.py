"""Cost of one LLM call from the configured price table.

Why a table and not a guess: the dollar budget is only as honest as the prices
behind it. A model missing from ``llm.prices_usd_per_mtok`` is therefore a
configuration error raised *before* the first call, not a silent zero; a free
local model is declared with prices of 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.errors import ConfigError


def check_priced(model: str, table: Mapping[str, Mapping[str, float]]) -> None:
    """Raise ConfigError when ``model`` has no input/output price."""
    entry = table.get(model)
    if entry is None or "input" not in entry or "output" not in entry:
        known = ", ".join(sorted(table)) or "none"
        raise ConfigError(
            f"no price for LLM model {model!r} (priced: {known})",
            fix=(
                f'add [llm.prices_usd_per_mtok."{model}"] with input = <USD per 1M prompt tokens> and '
                "output = <USD per 1M completion tokens> to kernelsmith.toml (0 and 0 for a free local model)"
            ),
        )


def cost_usd(model: str, prompt_tokens: int, completion_tokens: int, table: Mapping[str, Mapping[str, float]]) -> float:
    """USD for one call; prices are per million tokens."""
    check_priced(model, table)
    entry = table[model]
    return (prompt_tokens * float(entry["input"]) + completion_tokens * float(entry["output"])) / 1_000_000.0
