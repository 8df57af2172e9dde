"""Realistic shapes for a task: model dimensions crossed with token counts.

The catalog (``extract/shapes/<model>.toml``) holds, per model, the figures of
the model repo's Hugging Face ``config.json`` that kernels see (hidden size, MLP
widths, heads, head dim, experts, top-k, MLA ranks), each with the config key it
comes from (``key``) or how it follows from keys (``derived``), plus a few
architecture flags (dense MLP, MoE, per-head q/k norm, MLA) with their reason.

A *mapping* says which model dimension each contract symbol takes. It is a list
of families (``[[shapes]]`` in a curated contract, else :data:`DEFAULT_FAMILIES`);
each family maps every symbol to an expression over the model's dims and
``tokens`` (names, integers and ``*``: ``"tokens*num_experts_per_tok"``) and may
``require`` a flag or dim (``"!mla"``: only the models without it), or a list of them
(all must hold). E.g. silu_and_mul's ``hidden_size`` is
``intermediate_size`` for dense MLPs and ``moe_intermediate_size`` (rows =
tokens x top-k) for MoE experts; rmsnorm's is ``hidden_size``, plus ``head_dim``
for models that normalise each q/k head and the MLA latent ranks.

What must stay true:
- Every figure used has a source; :func:`load_catalog` refuses a figure without one.
- Cases are deduplicated on (rows, sizes): the first model (catalog order) keeps
  the case and the others are named in its ``source``.
- A width the contract rejects (``divisibility``, ``allowed_values``,
  ``max_values``) is skipped, never silently changed.
- ``ShapeCase.tokens`` is the number of rows the op sees (the contract's token
  symbol), which is what the harness keys on; the model's own token count is in
  ``source`` when they differ.
- Symbols that size a tensor but have no mapping are returned as notes; the
  task records them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib
from collections.abc import Iterable
from typing import Any

from contract import expr
from contract.errors import ExprError
from pipeline.errors import ConfigError
from pipeline.records import Contract, ShapeCase

CATALOG_DIR = pathlib.Path(__file__).with_name("shapes")
# Catalog order: the first model to produce a shape keeps its name on the case.
MODEL_ORDER = ("Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B", "Qwen3-235B-A22B", "DeepSeek-V3", "Mixtral-8x7B")
# (the models added for issue 18 follow by name: their names are unique, so dedup stays stable)

# Symbol names seen in SGLang's SymbolicSize declarations -> catalog expressions.
TOKEN_SYMBOLS = ("num_tokens", "tokens", "batch_size", "bs", "num_rows", "num_seqs", "batch")
DEFAULT_FAMILIES: list[dict[str, str]] = [
    {
        **{s: "tokens" for s in TOKEN_SYMBOLS},
        "hidden_size": "hidden_size",
        "hidden": "hidden_size",
        "hidden_dim": "hidden_size",
        "d_model": "hidden_size",
        "head_dim": "head_dim",
        "head_size": "head_dim",
        "num_heads": "num_attention_heads",
        "num_qo_heads": "num_attention_heads",
        "num_q_heads": "num_attention_heads",
        "num_attention_heads": "num_attention_heads",
        "num_kv_heads": "num_key_value_heads",
        "num_key_value_heads": "num_key_value_heads",
        "intermediate_size": "intermediate_size",
        "inter_size": "intermediate_size",
        "num_experts": "num_experts",
        "n_experts": "num_experts",
        "num_local_experts": "num_experts",
        "topk": "num_experts_per_tok",
        "top_k": "num_experts_per_tok",
        "num_experts_per_tok": "num_experts_per_tok",
        "vocab_size": "vocab_size",
        "vocab": "vocab_size",
        "kv_lora_rank": "kv_lora_rank",
        "q_lora_rank": "q_lora_rank",
        "qk_rope_head_dim": "qk_rope_head_dim",
        "rope_dim": "qk_rope_head_dim",
        "qk_nope_head_dim": "qk_nope_head_dim",
        "v_head_dim": "v_head_dim",
        "hc_mult": "hc_mult",
    }
]


FAMILIES = ("llm", "diffusion")
# A family's keys that are not symbols: the flag or dim it requires, its reason, and the
# symbol that is the op's own axis (``ShapeCase.tokens``) where that is not the token count.
FAMILY_KEYS = ("requires", "why", "axis")


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    repo: str
    config_url: str
    dims: dict[str, int]
    sources: dict[str, str]  # dim or flag -> where it comes from
    flags: dict[str, bool]
    family: str = "llm"
    # The classes the checkpoint loads (config.json "architectures", a DiT's class): the
    # SGLang model file whose EntryClass lists one is this model's (extract.model_ops).
    architectures: tuple[str, ...] = ()
    # The model's own token counts where the catalog sets them (a DiT's image tokens at
    # the resolutions SGLang samples by default), with why; else the caller's.
    token_counts: tuple[int, ...] = ()
    tokens_why: str = ""


def load_catalog(directory: pathlib.Path = CATALOG_DIR) -> list[Model]:
    """Every ``<model>.toml`` of the catalog, in :data:`MODEL_ORDER` (others after, by name)."""
    models = []
    for path in sorted(directory.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"shape catalog {path} is not valid TOML: {err}", fix="fix the TOML syntax") from err
        name = data.get("model") or path.stem
        where = data.get("source") or f"{data.get('repo', name)} config.json"
        dims, sources, flags = {}, {}, {}
        for dim, entry in (data.get("dims") or {}).items():
            if not isinstance(entry, dict) or "value" not in entry:
                raise ConfigError(f"{path}: dims.{dim} needs a value", fix='write `{ value = N, key = "config key" }`')
            if "key" in entry:
                sources[dim] = f'{where} "{entry["key"]}"'
                if entry.get("note"):
                    sources[dim] += f" ({entry['note']})"
            elif "derived" in entry:
                sources[dim] = f"{where}: {entry['derived']}"
            else:
                raise ConfigError(
                    f"{path}: dims.{dim} has no source",
                    fix='add `key = "<config.json key>"` or `derived = "<how>"` to the figure',
                )
            dims[dim] = int(entry["value"])
        for flag, entry in (data.get("flags") or {}).items():
            if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
                raise ConfigError(
                    f"{path}: flags.{flag} needs value and source", fix='write `{ value = true, source = "why" }`'
                )
            flags[flag] = bool(entry["value"])
            sources[f"flag:{flag}"] = entry["source"]
        family = data.get("family", "llm")
        if family not in FAMILIES:
            raise ConfigError(f"{path}: family {family!r} is not one of {FAMILIES}", fix='write family = "llm"')
        tokens = data.get("tokens") or {}
        if tokens and not (tokens.get("values") and tokens.get("why")):
            raise ConfigError(f"{path}: [tokens] needs values and why", fix='write values = [..] and why = ".."')
        models.append(
            Model(
                name,
                data.get("repo", ""),
                data.get("config", ""),
                dims,
                sources,
                flags,
                family=family,
                architectures=tuple(data.get("architectures", ())),
                token_counts=tuple(int(t) for t in tokens.get("values", ())),
                tokens_why=str(tokens.get("why", "")),
            )
        )
    order = {n: i for i, n in enumerate(MODEL_ORDER)}
    models.sort(key=lambda m: (order.get(m.name, len(order)), m.name))
    return models


def evaluate_dim(entry: str | int, dims: dict[str, int]) -> int | None:
    """``"tokens*num_experts_per_tok"``, ``"2*moe_intermediate_size"``, ``"hidden_size/128"`` over
    dims: :mod:`contract.expr`'s arithmetic grammar, ``/`` dividing exactly. None when a name is
    missing or not positive, a division is inexact (the model's width does not split into those
    groups), or the value is not positive."""
    if isinstance(entry, int):
        return entry
    try:
        tree = expr.parse(str(entry), expr.ARITHMETIC)
    except ExprError:
        return None
    if any(dims.get(name, 0) <= 0 for name in expr.names(tree)):
        return None
    try:
        value = int(expr.evaluate(tree, dims, exact=True))
    except ExprError:
        return None
    return value if value > 0 else None


def _requires(family: dict[str, Any]) -> list[str]:
    """A family's ``requires``: one flag or dim (``"moe"``, ``"!mla"``) or a list of them, all of
    which must hold (``["!mla", "!linear_attention"]``)."""
    need = family.get("requires")
    if not need:
        return []
    return [need] if isinstance(need, str) else [str(n) for n in need]


def _meets(model: Model, need: str) -> bool:
    """``"flag"``: the model has that flag set or that dim; ``"!flag"``: it has neither."""
    if need.startswith("!"):
        return not (model.flags.get(need[1:]) or model.dims.get(need[1:]))
    return bool(model.flags.get(need) or model.dims.get(need))


def _names(entry: str | int) -> list[str]:
    """The dims a family entry reads, in order of first use (none for an integer)."""
    if isinstance(entry, int):
        return []
    try:
        found = expr.names(expr.parse(str(entry), expr.ARITHMETIC))
    except ExprError:
        return []
    return sorted(found, key=lambda n: str(entry).index(n))


def _dim_names(dim: str) -> list[str]:
    """The size symbols a shape entry reads, in order: its names, not the functions it calls
    (``min(1, batch_size // 2049)`` reads ``batch_size``, not ``min``)."""
    return [m.group(1) for m in re.finditer(r"([A-Za-z_]\w*)(\s*\()?", dim) if not m.group(2)]


def tensor_symbols(contract: Contract) -> list[str]:
    """Symbols that size some tensor (stride-only symbols are the harness's to choose)."""
    out: list[str] = []
    for arg in contract.args:
        if arg.tensor is None:
            continue
        for dim in arg.tensor.shape:
            if isinstance(dim, str):
                for name in _dim_names(dim):
                    if name not in out:
                        out.append(name)
    return out


def shape_cases(
    contract: Contract,
    families: list[dict[str, Any]] | None = None,
    token_counts: Iterable[int] = (1, 8, 64, 512, 4096, 16384),
    models: list[Model] | None = None,
) -> tuple[list[ShapeCase], list[str]]:
    """Catalog shapes for ``contract``: (cases, notes about symbols or widths left out)."""
    models = models if models is not None else load_catalog()
    families = families or DEFAULT_FAMILIES
    symbols = tensor_symbols(contract)
    notes: list[str] = []
    mapped = {s for fam in families for s in fam if s not in FAMILY_KEYS}
    unmapped = [s for s in symbols if s not in mapped]
    if unmapped:
        notes.append(
            f"no model mapping for symbol(s) {', '.join(unmapped)}: no catalog shapes; "
            "add a [[shapes]] family to extract/curated/<op>.toml"
        )
        return [], notes
    token_symbol = next((s for s in symbols for fam in families if str(fam.get(s, "")).startswith("tokens")), None)
    cases: list[ShapeCase] = []
    index: dict[tuple[int, tuple[tuple[str, int], ...]], int] = {}
    rejected: dict[str, set[int]] = {}
    token_counts = tuple(token_counts)
    pairs = [(t, m) for t in sorted({t for m in models for t in (m.token_counts or token_counts)}) for m in models]
    for tokens, model in pairs:
        if tokens not in (model.token_counts or token_counts):
            continue
        for fam in families:
            needs = _requires(fam)
            if not all(_meets(model, need) for need in needs):
                continue
            dims = {**model.dims, "tokens": int(tokens)}
            sizes: dict[str, int] = {}
            ok = True
            for sym in symbols:
                value = evaluate_dim(fam[sym], dims)
                if value is None:
                    ok = False
                    break
                if not contract.accepts(sym, value):
                    rejected.setdefault(sym, set()).add(value)
                    ok = False
                    break
                sizes[sym] = value
            if not ok:
                continue
            axis = fam.get("axis") or token_symbol
            rows = sizes.get(axis, int(tokens)) if axis else int(tokens)
            per_token = any("tokens" in _names(fam[sym]) for sym in symbols)
            if not per_token:  # sizes that do not follow the token count: one case per width
                rows = sizes.get(axis, 0) if axis else 0
            used = [n for sym in symbols for n in _names(fam[sym]) if n != "tokens"]
            where = "; ".join(
                f"{sym}={fam[sym]}: {model.sources.get(n, n)}"
                for sym in symbols
                for n in _names(fam[sym])
                if n != "tokens"
            )
            for need in needs:
                if not need.startswith("!"):
                    where += f"; requires {need}: {model.sources.get('flag:' + need, need)}"
            if per_token:
                label = f"{model.name} at {tokens} tokens" + (f" ({rows} rows)" if rows != tokens else "")
            else:
                label = model.name + (f" ({axis}={rows})" if axis else "")
            if model.token_counts:
                label += f" ({model.tokens_why})"
            source = f"{label}; {where}" if used else label
            key = (rows, tuple(sorted(sizes.items())))
            if key in index:
                prior = cases[index[key]]
                if model.name not in prior.source:
                    cases[index[key]] = prior.model_copy(update={"source": prior.source + f" | also {label}"})
                continue
            index[key] = len(cases)
            cases.append(ShapeCase(model=model.name, tokens=rows, sizes=sizes, source=source))
    for sym, values in rejected.items():
        notes.append(f"catalog widths the contract rejects for {sym}: {sorted(values)}")
    return cases, notes
