"""Layer recipes: one model's decoder layer as data (``integrate/layers/<model>.toml``).

Why: the end-to-end proxy (:mod:`integrate.e2e`) must time a *whole* decoder layer
at a real model's shapes, and which ops a layer runs, in what order and at what
sizes, is a fact about the model, not about our code. So the layer is written
once, here as data, and e2e's Python holds no op name.

Recipe file (TOML)::

    model = "Llama-3.1-8B"       # the shape-catalog entry (extract/shapes/<model>.toml)
                                 # whose integer figures (hidden_size, ...) the recipe uses
    [figures]                    # figures the catalog does not carry (floats), each with
    rms_norm_eps = { value = 1e-5, key = "rms_norm_eps" }   # its config.json key
    [proxy]
    kv_len = 2048                # decode: KV-cache tokens each sequence attends to
    rope_positions = 8192        # rows of the cos/sin cache
    decode = [1, 8, 32]          # sequences per decode step (one token each)
    layers = "num_hidden_layers" # the model's layers this layer stands for (the default)
    prefill = [4096]             # tokens of one prefill step
    [tensors]                    # name -> shape (expressions), init, dtype, phase, shared
    x = { shape = ["T", "hidden_size"] }
    q_rot = { view = { of = "q", narrow = "rotary_dim" } }   # q[..., :rotary_dim]: a view, not a copy
    [[steps]]                    # in the layer's order
    name = "input_norm"
    op = "layernorm.fused_add_rmsnorm"                          # an SGLang op: op id and the
    function = "sglang.kernels.ops.layernorm.norm.fused_add_rmsnorm"   # tree's public function
    args = ["x", "residual", "w", "rms_norm_eps"]               # tensor or figure names
    kwargs = { is_neox = true }  # literal keyword arguments (optional)
    optional = false             # true: a tree without the function is timed without the step
    [[steps]]
    name = "qkv_proj"
    torch = "linear"             # a torch reference part: see TORCH_PARTS
    args = ["x", "w_qkv", "qkv"]
    source = "srt/models/llama.py:244"   # where SGLang's model runs the step (checked: check_sources)

An argument is a tensor or figure name, or a literal inline table: ``{ expr = "num_experts + 1" }``
(an integer expression, as shapes are), ``{ text = "softmax" }`` (a string), ``{ dtype = "fp32" }``
(a torch dtype) or ``{ none = true }``.

Shape entries are integer expressions (``"2 * intermediate_size"``) over the
figures, ``T`` (the step's tokens; at decode one per sequence), ``kv_len`` and
``rope_positions``, evaluated by the harness's one restricted evaluator
(:func:`optimize.harness.inputs.eval_expr`). A tensor or step with ``phase`` exists
only in that phase ("decode" or "prefill").

What must stay true: every figure is tied to its config key (the catalog's, or
``key`` here; a ``derived`` note where it follows from keys); a recipe that does
not validate (unknown key, unknown name in a shape or an argument, a step with both
or neither of ``op``/``torch``, a name used twice in one phase) fails
:func:`load_recipe` with the file, the entry and the fix, before any GPU time is
spent. :func:`plan` turns a recipe into the plain JSON the worker
(:mod:`integrate.layer_worker`) runs; the worker knows tensor inits and torch parts,
never op names.
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from contract.errors import ContractError
from contract.sizes import eval_expr, expr_symbols
from extract.shapes import load_catalog
from integrate.errors import RecipeError
from pipeline.record_io import Record

LAYER_DIR = pathlib.Path(__file__).resolve().parent / "layers"
DEFAULT_RECIPE = LAYER_DIR / "llama-3.1-8b.toml"

Phase = Literal["decode", "prefill"]
PHASES: tuple[Phase, ...] = ("decode", "prefill")
#: Torch reference parts the worker knows (name -> its tensor arguments, in order).
TORCH_PARTS: dict[str, tuple[str, ...]] = {
    "linear": ("input", "weight", "out"),  # out = input @ weight.T (torch.mm, cuBLAS); weight [out, in]
    "attention_decode": ("q", "k_cache", "v_cache", "out"),  # q [B, H, D]; caches [B, KV, L, D]; out [B, H*D]
    "attention_causal": ("q", "k", "v", "out"),  # q [T, H, D]; k, v [T, KV, D], causal; out [T, H*D]
    # MoE experts (a stand-in for SGLang's Triton fused_moe, whose kernels are not JIT ops): the routed
    # rows gathered in expert order, one grouped GEMM per projection, and the top-k rows summed back
    "moe_gather": ("input", "rows", "out"),  # out = input[rows, :out width]; rows [T*k] (moe_rows)
    "grouped_linear": ("input", "weight", "offsets", "out"),  # torch._grouped_mm; weight [E, out, in]
    "moe_combine": ("input", "inverse", "weights", "out"),  # out[t] = sum_j weights[t, j] * input[inverse[t, j]]
    # stand-ins for kernels that are neither JIT ops nor torch's (sgl_kernel's AOT norms, DeepGEMM's
    # fp8 GEMMs, FlashInfer's router, FA3's MLA): each recipe header says which step stands in for what
    "linear_fp8": ("input", "weight", "out"),  # weight [N, K/2] bf16 over input[:, :K/2]: fp8 [N, K]'s bytes and time
    "grouped_linear_fp8": ("input", "weight", "offsets", "out"),  # the same for experts [E, N, K/2]
    "add_rmsnorm": ("input", "residual", "weight"),  # residual += input; input = rmsnorm(residual)
    "rmsnorm": ("input", "weight"),  # in place
    "bmm": ("a", "b", "out"),  # torch.bmm
    "router_topk": ("logits", "weights", "ids"),  # sigmoid, top-k, renormalised
    "attention_mla_decode": ("q_nope", "q_pe", "latent", "out"),  # [H,B,Dl], [B,H,Dr], [B,L,Dl+Dr] -> [H,B,Dl]
    "sigmoid_mul": ("input", "gate"),  # input *= sigmoid(gate): torch's two kernels, as a gated attention runs them
}
Init = Literal[
    "randn",
    "norm_weight",
    "weight",
    "empty",
    "rope_cos_sin",
    "positions",
    "topk_ids",
    "moe_rows",
    "moe_offsets",
    "moe_inverse",
    "moe_weights",
]
_ROUTING = frozenset({"tokens", "experts", "topk"})
#: the params each init needs (figure names or integer expressions). The routing inits (top-k ids, the
#: rows in expert order, each expert's end offset, each slot's row, the renormalised weights) all come
#: from one fixed draw per (tokens, experts, topk), so they agree with each other in every buffer set.
INIT_PARAMS: dict[str, frozenset[str]] = {
    "rope_cos_sin": frozenset({"theta"}),
    "positions": frozenset({"high"}),
    **{init: _ROUTING for init in ("topk_ids", "moe_rows", "moe_offsets", "moe_inverse", "moe_weights")},
}
STEP_SYMBOLS = ("T",)  # symbols a shape may use besides the figures and the proxy settings
RESERVED = frozenset({"layer", "non_gemm"})  # sample names the worker uses for whole graphs


class Figure(Record):
    """One model figure and where it comes from."""

    value: float
    source: str  # e.g. 'meta-llama/Llama-3.1-8B config.json "hidden_size"'
    integer: bool = False  # a count (the catalog's dims): passed to a step as an int


class Given(Record):
    """A literal argument: an integer expression over the sizes, a string, a torch dtype, or None."""

    expr: str | None = None
    text: str | None = None
    dtype: Literal["bf16", "fp16", "fp32", "int32", "int64"] | None = None
    none: bool = False

    @model_validator(mode="after")
    def _one(self) -> Given:
        if (self.expr is not None) + (self.text is not None) + (self.dtype is not None) + self.none != 1:
            raise ValueError(
                "a literal argument is exactly one of { expr = ... }, { text = ... }, { dtype = ... }, { none = true }"
            )
        return self


class Proxy(Record):
    # how many of the model's layers this recipe's layer stands for (an integer expression over the
    # figures): all of them, or one kind of a hybrid model's layers
    layers: str = "num_hidden_layers"
    kv_len: int = Field(gt=0)
    rope_positions: int = Field(gt=0)
    decode: list[int] = Field(default_factory=list)
    prefill: list[int] = Field(default_factory=list)


class View(Record):
    """A view of another tensor: the first ``narrow`` entries of its last dimension (SGLang's
    ``q[..., :rotary_dim]`` for a partial RoPE), so a step sees the same strides the model passes."""

    of: str
    narrow: str  # an integer expression over the sizes


class TensorDef(Record):
    shape: list[str | int] = Field(default_factory=list)
    init: Init = "randn"
    params: dict[str, str] = Field(default_factory=dict)
    dtype: Literal["model", "fp32", "int64", "int32"] = "model"
    phase: Phase | None = None
    shared: bool = False  # one copy for every buffer set (read-only tables)
    view: View | None = None  # instead of shape, init, params, dtype, shared and phase: a view of a tensor

    @model_validator(mode="after")
    def _shape_or_view(self) -> TensorDef:
        if self.view is None and not self.shape:
            raise ValueError("a tensor needs `shape` (or `view`, a view of another tensor)")
        own = self.model_fields_set & {"shape", "init", "params", "dtype", "shared", "phase"}
        if self.view is not None and own:
            raise ValueError(f"a view takes its {', '.join(sorted(own))} from the tensor it views: remove them")
        return self


class Step(Record):
    name: str
    op: str | None = None  # SGLang op id
    function: str | None = None  # dotted path of the tree's public function
    torch: str | None = None  # a name in TORCH_PARTS
    args: list[str | Given]
    kwargs: dict[str, bool | int | float | str | Given] = Field(default_factory=dict)
    phase: Phase | None = None
    optional: bool = False
    source: str = ""  # "srt/models/<file>.py:<line>": where SGLang's model runs this step (check_sources)

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if (self.op is None) == (self.torch is None):
            raise ValueError("give exactly one of `op` (an SGLang op) or `torch` (a reference part)")
        if self.op is not None and not self.function:
            raise ValueError("an SGLang step needs `function`, the dotted path of the tree's public function")
        if self.torch is not None and self.torch not in TORCH_PARTS:
            raise ValueError(f"unknown torch part {self.torch!r}; known: {', '.join(TORCH_PARTS)}")
        if self.source and not re.fullmatch(r"[\w./-]+\.py:\d+", self.source):
            raise ValueError(f"source {self.source!r} is not <package-relative file>.py:<line>")
        if self.torch is not None and len(self.args) != len(TORCH_PARTS[self.torch]):
            raise ValueError(
                f"torch part {self.torch} takes {len(TORCH_PARTS[self.torch])} arguments ({', '.join(TORCH_PARTS[self.torch])})"
            )
        return self

    @property
    def part(self) -> str:
        """What runs this step, for records: 'SGLang <op id>' or 'torch <part>'."""
        return f"SGLang {self.op}" if self.op is not None else f"torch {self.torch}"


class LayerRecipe(Record):
    model: str
    path: str  # the file it was read from
    layers: int  # the model's decoder layers this layer stands for (proxy.layers)
    figures: dict[str, Figure]
    proxy: Proxy
    tensors: dict[str, TensorDef]
    steps: list[Step]

    def base(self, name: str) -> TensorDef:
        """The tensor that holds ``name``'s memory: itself, or the tensor it is a view of."""
        tensor = self.tensors[name]
        return self.tensors[tensor.view.of] if tensor.view is not None else tensor

    def values(self) -> dict[str, float]:
        return {name: f.value for name, f in self.figures.items()}

    def steps_in(self, phase: Phase) -> list[Step]:
        return [s for s in self.steps if s.phase in (None, phase)]

    def parts(self) -> dict[str, str]:
        """Step name -> what runs it; a step that differs per phase says both ("torch attention_decode (decode) / ...")."""
        out: dict[str, str] = {}
        for step in self.steps:
            label = step.part + (f" ({step.phase})" if step.phase else "")
            out[step.name] = f"{out[step.name]} / {label}" if step.name in out else label
        return out

    def points(self) -> list[tuple[Phase, int]]:
        return [("decode", b) for b in self.proxy.decode] + [("prefill", t) for t in self.proxy.prefill]


def _fail(path: pathlib.Path, where: str, message: str, fix: str) -> RecipeError:
    return RecipeError(f"layer recipe {path}: {where}: {message}", fix=fix)


def load_recipe(path: pathlib.Path = DEFAULT_RECIPE, *, catalog_dir: pathlib.Path | None = None) -> LayerRecipe:
    """Read and validate a recipe; every figure comes with its config key."""
    path = pathlib.Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise RecipeError(
            f"layer recipe {path} not found", fix=f"pass one of {', '.join(p.name for p in LAYER_DIR.glob('*.toml'))}"
        ) from err
    except tomllib.TOMLDecodeError as err:
        raise _fail(path, "TOML", str(err), "fix the TOML syntax") from err
    unknown = sorted(set(data) - {"model", "figures", "proxy", "tensors", "steps"})
    if unknown:
        raise _fail(path, "top level", f"unknown keys {unknown}", "use model, figures, proxy, tensors, steps")
    model = data.get("model")
    catalog = {m.name: m for m in (load_catalog(catalog_dir) if catalog_dir else load_catalog())}
    if model not in catalog:
        raise _fail(
            path,
            "model",
            f"{model!r} is not in the shape catalog (has: {', '.join(sorted(catalog))})",
            "name a model of extract/shapes/",
        )
    entry = catalog[model]
    figures = {
        name: Figure(value=value, source=entry.sources[name], integer=True) for name, value in entry.dims.items()
    }
    repo = entry.repo or model
    for name, raw in (data.get("figures") or {}).items():
        if name in figures:
            raise _fail(
                path,
                f"figures.{name}",
                "the shape catalog already has this figure",
                f"remove it here (one fact, written once in extract/shapes/{model}.toml)",
            )
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("value"), (int, float))
            or not (raw.get("key") or raw.get("derived"))
        ):
            raise _fail(
                path,
                f"figures.{name}",
                "needs a number and its source",
                'write `{ value = N, key = "<config.json key>" }` (or `derived = "<how>"`)',
            )
        extra = sorted(set(raw) - {"value", "key", "derived"})
        if extra:
            raise _fail(path, f"figures.{name}", f"unknown keys {extra}", "use value, key or derived")
        source = f'{repo} config.json "{raw["key"]}"' if raw.get("key") else f"{repo} config.json: {raw['derived']}"
        figures[name] = Figure(value=float(raw["value"]), source=source, integer=isinstance(raw["value"], int))
    if "num_hidden_layers" not in figures:
        raise _fail(path, "model", f"the catalog entry {model} has no num_hidden_layers", "add it to the catalog")
    try:
        proxy = Proxy.model_validate(data.get("proxy") or {})
        tensors = {name: TensorDef.model_validate(raw) for name, raw in (data.get("tensors") or {}).items()}
        steps = [Step.model_validate(raw) for raw in data.get("steps") or []]
    except ValidationError as err:
        errors = err.errors()
        # an argument matches none of a union's kinds: say why it is not a literal, the kind it meant
        first = next((e for e in errors if "literal argument" in e.get("msg", "")), errors[0])
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise _fail(
            path, where or "entry", first.get("msg", str(err)), "see integrate/recipe.py for the format"
        ) from err
    try:
        layers = eval_expr(proxy.layers, _integers(figures))
    except ContractError as err:
        raise _fail(path, "proxy.layers", err.message, "write an integer expression over the figures") from err
    recipe = LayerRecipe(
        model=model,
        path=str(path),
        layers=layers,
        figures=figures,
        proxy=proxy,
        tensors=tensors,
        steps=steps,
    )
    _validate(recipe, path)
    return recipe


def _integers(figures: dict[str, Figure]) -> dict[str, int]:
    """The figures a size expression may use: the whole-numbered ones."""
    return {name: int(f.value) for name, f in figures.items() if float(f.value).is_integer()}


def _sizes(recipe: LayerRecipe, tokens: int) -> dict[str, int]:
    sizes = _integers(recipe.figures)
    sizes.update(T=tokens, kv_len=recipe.proxy.kv_len, rope_positions=recipe.proxy.rope_positions)
    return sizes


def _names(step: Step) -> list[str]:
    """The tensor and figure names a step uses (its literal arguments left out)."""
    return [a for a in [*step.args, *step.kwargs.values()] if isinstance(a, str)]


def _validate(recipe: LayerRecipe, path: pathlib.Path) -> None:
    if not recipe.steps:
        raise _fail(path, "steps", "the layer has no step", "list the layer's ops in order under [[steps]]")
    if not recipe.points():
        raise _fail(path, "proxy", "no decode or prefill point", "give proxy.decode and/or proxy.prefill token counts")
    known = set(_sizes(recipe, 1))
    for name, tensor in recipe.tensors.items():
        if name in RESERVED or name in recipe.figures:
            raise _fail(
                path, f"tensors.{name}", "the name is taken (a figure or a reserved sample name)", "rename the tensor"
            )
        if tensor.view is not None:
            base = recipe.tensors.get(tensor.view.of)
            if base is None or base.view is not None:
                raise _fail(
                    path,
                    f"tensors.{name}",
                    f"view.of {tensor.view.of!r} is not a tensor of this recipe (or is a view itself)",
                    "name a tensor declared with a shape under [tensors]",
                )
        for entry in [*tensor.shape, *tensor.params.values(), *([tensor.view.narrow] if tensor.view else [])]:
            try:
                missing = expr_symbols(entry) - known
            except ContractError as err:
                raise _fail(
                    path,
                    f"tensors.{name}",
                    err.message,
                    "write an integer expression over the figures, T, kv_len, rope_positions",
                ) from err
            if missing:
                raise _fail(
                    path,
                    f"tensors.{name}",
                    f"{entry!r} uses unknown names {sorted(missing)} (known: {', '.join(sorted(known))})",
                    "fix the shape",
                )
        needs = INIT_PARAMS.get(tensor.init, frozenset())
        if set(tensor.params) != needs:
            raise _fail(
                path,
                f"tensors.{name}",
                f"init {tensor.init} takes params {sorted(needs)}, got {sorted(tensor.params)}",
                "fix params",
            )
    for phase in PHASES:
        seen: set[str] = set()
        for step in recipe.steps_in(phase):
            if step.name in seen or step.name in RESERVED:
                raise _fail(
                    path,
                    f"steps.{step.name}",
                    f"the name is used twice in the {phase} layer (or is reserved)",
                    "give each step its own name",
                )
            seen.add(step.name)
            for given in [*step.args, *step.kwargs.values()]:
                if isinstance(given, Given) and given.expr is not None:
                    try:
                        missing = expr_symbols(given.expr) - known
                    except ContractError as err:
                        raise _fail(path, f"steps.{step.name}", err.message, "write an integer expression") from err
                    if missing:
                        raise _fail(
                            path,
                            f"steps.{step.name}",
                            f"{given.expr!r} uses unknown names {sorted(missing)} (known: {', '.join(sorted(known))})",
                            "fix the expression",
                        )
            for arg in _names(step):
                used = recipe.tensors.get(arg)
                if used is not None:
                    if recipe.base(arg).phase not in (None, phase):
                        raise _fail(
                            path,
                            f"steps.{step.name}",
                            f"tensor {arg} exists only at {used.phase}, the step runs at {phase}",
                            "give the step a phase",
                        )
                elif arg not in recipe.figures:
                    raise _fail(
                        path,
                        f"steps.{step.name}",
                        f"argument {arg!r} is neither a tensor nor a figure",
                        "declare it under [tensors] or [figures]",
                    )
            if step.torch is not None and any(not isinstance(a, str) or a not in recipe.tensors for a in step.args):
                raise _fail(path, f"steps.{step.name}", "a torch part takes tensors only", "pass tensor names")
    for phase, tokens in recipe.points():
        plan(recipe, phase, tokens)  # every shape evaluates (exact division, positive sizes)


def plan(recipe: LayerRecipe, phase: Phase, tokens: int) -> dict[str, object]:
    """The concrete layer at one point, as the plain JSON the worker runs."""
    sizes = _sizes(recipe, tokens)
    values = recipe.values()
    steps = recipe.steps_in(phase)
    used = {a for s in steps for a in _names(s)}
    used |= {t.view.of for n, t in recipe.tensors.items() if n in used and t.view is not None}
    tensors: dict[str, object] = {}
    for name, tensor in recipe.tensors.items():
        if recipe.base(name).phase not in (None, phase) or name not in used:
            continue
        if tensor.view is not None:
            try:
                narrow = eval_expr(tensor.view.narrow, sizes)
            except ContractError as err:
                raise RecipeError(
                    f"layer recipe {recipe.path}: tensors.{name} at {phase} T={tokens}: {err.message}",
                    fix="fix view.narrow",
                ) from err
            tensors[name] = {"view": tensor.view.of, "narrow": narrow}
            continue
        try:
            shape = [eval_expr(entry, sizes) for entry in tensor.shape]
            params = {k: (values[v] if v in values else eval_expr(v, sizes)) for k, v in tensor.params.items()}
        except ContractError as err:
            raise RecipeError(
                f"layer recipe {recipe.path}: tensors.{name} at {phase} T={tokens}: {err.message}", fix="fix the shape"
            ) from err
        if any(d <= 0 for d in shape):
            raise RecipeError(
                f"layer recipe {recipe.path}: tensors.{name} at {phase} T={tokens} has shape {shape}",
                fix="every size must be positive",
            )
        tensors[name] = {
            "shape": shape,
            "init": tensor.init,
            "params": params,
            "dtype": tensor.dtype,
            "shared": tensor.shared,
        }

    def arg(value: str | bool | float | Given) -> dict[str, object]:
        if isinstance(value, Given):
            if value.expr is not None:
                try:
                    return {"value": eval_expr(value.expr, sizes)}
                except ContractError as err:
                    raise RecipeError(
                        f"layer recipe {recipe.path}: {value.expr!r} at {phase} T={tokens}: {err.message}",
                        fix="fix the expression",
                    ) from err
            if value.dtype is not None:
                return {"dtype": value.dtype}
            return {"value": value.text}  # None for { none = true }
        if isinstance(value, str):
            if value in recipe.tensors:
                return {"tensor": value}
            figure = recipe.figures[value]
            return {"value": int(figure.value) if figure.integer else figure.value}
        return {"value": value}

    return {
        "phase": phase,
        "tokens": tokens,
        "tensors": tensors,
        "steps": [
            {
                "name": s.name,
                "op": s.op,
                "function": s.function,
                "torch": s.torch,
                "optional": s.optional,
                "args": [arg(a) for a in s.args],
                "kwargs": {k: arg(v) for k, v in s.kwargs.items()},
            }
            for s in steps
        ],
    }


def check_sources(recipe: LayerRecipe, package: pathlib.Path) -> list[str]:
    """Each step whose ``source`` is not in the tree ``package`` (the sglang package root): the file is
    gone (a model file that moved) or is shorter than the line. One line per step, naming the fix."""
    problems = []
    for step in recipe.steps:
        if not step.source:
            continue
        rel, _, line = step.source.rpartition(":")
        path = package / rel
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").count("\n") + 1
        except OSError:
            problems.append(
                f"layer recipe {recipe.path}: step {step.name}: {rel} is not in this tree (the model file moved?); "
                "fix: point the step's `source` at the file and line that run it now"
            )
            continue
        if int(line) > lines:
            problems.append(
                f"layer recipe {recipe.path}: step {step.name}: {step.source} is past the end of the file ({lines} lines); "
                "fix: update the step's `source` line"
            )
    return problems


def all_recipes(layer_dir: pathlib.Path = LAYER_DIR) -> tuple[list[LayerRecipe], dict[str, str]]:
    """Every recipe of ``layer_dir`` that loads, and file name -> why for each that does not (a broken
    recipe never stops the others)."""
    good: list[LayerRecipe] = []
    bad: dict[str, str] = {}
    for path in sorted(layer_dir.glob("*.toml")):
        try:
            good.append(load_recipe(path))
        except RecipeError as err:
            bad[path.name] = f"{err.message} (fix: {err.fix})" if err.fix else err.message
    return good, bad


def recipes_for(ops: Iterable[str], recipes: Sequence[LayerRecipe]) -> list[LayerRecipe]:
    """The recipes with a step that runs one of ``ops`` (the changed code's ops), in file order; with
    none, the default recipe alone, so the PR still shows the layer around the change."""
    wanted = set(ops)
    hit = [r for r in recipes if any(step.op in wanted for step in r.steps)]
    if hit:
        return hit
    return [r for r in recipes if pathlib.Path(r.path).resolve() == DEFAULT_RECIPE.resolve()][:1]
