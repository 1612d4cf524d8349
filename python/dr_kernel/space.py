"""Search spaces from the forms users already write: a dict of value lists, or triton.Config lists."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import _core

# Launch options of triton.Config that tune like meta-parameters.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# maxnreg of a config that sets no cap on registers (triton.Config's maxnreg=None): a space's
# values are numbers, so "no cap" is 0 there and in config dicts, and None again at the launch.
NO_MAXNREG = 0
# What a launch option left unset means, for lists whose configs set it in some and not in others
# (mamba-ssm's Mamba3 kernels list maxnreg None, 128 and 256).
OPTION_DEFAULTS = {"num_ctas": 1, "maxnreg": NO_MAXNREG}


def make_space(
    space: Mapping[str, Sequence[Any]] | None = None,
    configs: Iterable[Any] | None = None,
    constraints: Sequence[str] = (),
    predicate: Callable[[dict], bool] | None = None,
) -> _core.Space:
    """Builds a search space.

    ``space`` maps each parameter to its values in "one step up" order, e.g.
    ``{"BLOCK_M": [64, 128, 256], "num_warps": [4, 8]}``. ``configs`` is instead a list of
    ``triton.Config`` (or of dicts), as given to ``triton.autotune``: the space is the product of
    their values restricted to exactly those configs. ``constraints`` are Python-syntax expressions
    over parameter names ("BLOCK_M * BLOCK_N <= 128 * 128"; also ``min``, ``max`` and ``cdiv`` as
    triton.cdiv); ``predicate`` is any callable taking a
    config dict (slower: it runs in Python for every config it checks).
    """
    if (space is None) == (configs is None):
        raise ValueError("give exactly one of space={name: [values]} or configs=[triton.Config, ...]")
    listed: list[dict] | None = None
    if configs is None and not space:
        raise ValueError("space={} has no parameters: give each parameter's values, e.g. "
                         "space={'BLOCK': [64, 128, 256], 'num_warps': [4, 8]}")
    if configs is not None:
        listed = complete_options([config_dict(c) for c in configs])
        if not listed:
            raise ValueError("configs=[] is empty: list at least one triton.Config")
        names = list(dict.fromkeys(k for c in listed for k in c))
        for c in listed:
            missing = [n for n in names if n not in c]
            if missing:
                raise ValueError(
                    f"config {c} lacks {', '.join(missing)}: every config must set the same parameters"
                )
        space = {n: sorted({c[n] for c in listed}, key=_order_key) for n in names}
    params = []
    for name, values in space.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"space[{name!r}] = {values!r}: give a list of values, e.g. [32, 64, 128]")
        if not isinstance(name, str) or not name:
            raise ValueError(f"space has a parameter named {name!r}: name each one after the kernel's constexpr "
                             "argument or launch option it sets")
        for value in values:
            if not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"space[{name!r}] holds {value!r}, a {type(value).__name__}: values are numbers, "
                                 "booleans or strings")
            if isinstance(value, int) and not -2**63 <= value < 2**63:
                raise ValueError(f"space[{name!r}] holds {value}, which is beyond 64-bit integers")
        params.append((name, list(values)))
    result = _core.Space(params, list(constraints))
    if listed is not None:
        result.allow_only(listed)
    if predicate is not None:
        result.add_predicate(predicate, getattr(predicate, "__name__", "predicate"))
    return result


def _order_key(value: Any) -> tuple:
    # Numbers ascending, then anything else by its text.
    if isinstance(value, (bool, int, float)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def config_dict(config: Any) -> dict:
    """A plain dict of a triton.Config (its kwargs plus launch options that differ from defaults)."""
    if isinstance(config, Mapping):
        return dict(config)
    kwargs = getattr(config, "kwargs", None)
    if kwargs is None:
        raise TypeError(f"{config!r} is neither a dict nor a triton.Config")
    out = dict(kwargs)
    out["num_warps"] = config.num_warps
    out["num_stages"] = config.num_stages
    if getattr(config, "num_ctas", 1) != 1:
        out["num_ctas"] = config.num_ctas
    if getattr(config, "maxnreg", None) is not None:
        out["maxnreg"] = config.maxnreg
    return out


def complete_options(configs: Sequence[dict]) -> list[dict]:
    """`configs` (dicts) with each launch option that some of them set and others leave unset
    given its default value in the others (OPTION_DEFAULTS): one space holds them all."""
    partial = [k for k in OPTION_DEFAULTS if any(k in c for c in configs) and not all(k in c for c in configs)]
    return [{**c, **{k: OPTION_DEFAULTS[k] for k in partial if k not in c}} for c in configs]


def launchable(config: Mapping[str, Any]) -> dict:
    """`config` as Triton takes it at a launch or compile: "no cap" on registers (NO_MAXNREG) is
    maxnreg left unset."""
    if config.get("maxnreg", None) == NO_MAXNREG:
        return {k: v for k, v in config.items() if k != "maxnreg"}
    return dict(config)


def config_key(config: Mapping[str, Any]) -> tuple:
    """A key under which two config dicts that launch alike are equal: a launch option at its
    default counts as unset (complete_options adds such entries)."""
    return tuple(sorted((k, v) for k, v in config.items()
                        if k != "__grid__" and not (k in OPTION_DEFAULTS and v == OPTION_DEFAULTS[k])))


def split_config(config: Mapping[str, Any]) -> tuple[dict, dict]:
    """Separates kernel meta-parameters from launch options (num_warps, num_stages, ...), the
    latter as Triton takes them (launchable)."""
    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    launch = {k: v for k, v in launchable(config).items() if k in LAUNCH_OPTIONS}
    return meta, launch


def to_triton_config(config: Mapping[str, Any]):
    """The triton.Config of a config dict."""
    import triton

    meta, launch = split_config(config)
    return triton.Config(meta, **launch)
