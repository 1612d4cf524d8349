"""Put dr_kernel in place of triton.autotune for the whole process, without editing any library.

    import dr_kernel
    dr_kernel.install()          # before the library is imported
    import some_library          # its @triton.autotune kernels now tune with dr_kernel

or, with no change to the program at all: ``DR_KERNEL_AUTOTUNE=1 python train.py`` (the package
installs a start-up hook that reads the variable), or ``python -m dr_kernel run train.py ...``.

Some libraries decorate with an autotuner of their own, a subclass of Triton's `Autotuner` that
they construct themselves (fla's `fla_cache_autotune`, which first looks for a config in its own
files): such a kernel never passes through triton.autotune. While installed, every instance of
such a subclass is taken over too: its launches that would benchmark the list go to dr_kernel,
and a config the subclass put in its own `cache` (its files' answer) is launched as Triton would.

Kernels decorated before install() keep Triton's autotuner. A kernel dr_kernel cannot take (its
decorator arguments are not understood) or fails on later keeps or returns to the library's own
autotuner, with one warning naming it and the reason; the program never sees an exception
that Triton would not raise. `taken_over()` and `kept()` say which kernels went which way.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager

_LOCK = threading.Lock()
# "original": triton.autotune before install(); "init" and "run": Triton's Autotuner.__init__ and
# .run, which install() wraps for libraries' subclasses of Autotuner.
_STATE: dict = {"original": None, "options": {}, "init": None, "run": None}
_TAKEN: list[str] = []
_KEPT: list[tuple[str, str]] = []

ENV_VARIABLE = "DR_KERNEL_AUTOTUNE"


def install(*, widen: bool = False, max_evals: int | None = None, strategy: str = "ppo", db: str | None = None,
            seed: int = 0, isolate: bool | None = False, defer: bool = False) -> None:
    """Replaces triton.autotune (triton.autotune, triton.runtime.autotune and
    triton.runtime.autotuner.autotune) with dr_kernel's, for kernels decorated from now on.
    `widen` also searches past each list where every config can be checked (see dr_kernel.autotune):
    off by default, since on the H200 it made first calls 2.4x stock's for 1.8 % of GPU time
    (docs/benchmarks.md). `isolate` as for dr_kernel.autotune: False measures in the program's
    process, as triton.autotune does; None in a measuring process where the kernel can go.
    `defer`: each key's first call launches its list's first config at once, and the key is tuned
    on a later call, once its list has compiled in the background (see dr_kernel.autotune)."""
    import triton
    import triton.runtime
    import triton.runtime.autotuner as autotuner

    with _LOCK:
        if _STATE["original"] is None:
            _STATE["original"] = autotuner.autotune
        if _STATE["init"] is None:
            _STATE["init"], _STATE["run"] = autotuner.Autotuner.__init__, autotuner.Autotuner.run
        _STATE["options"] = {"widen": widen, "max_evals": max_evals, "strategy": strategy, "db": db, "seed": seed,
                             "isolate": isolate, "defer": defer}
        triton.autotune = triton.runtime.autotune = autotuner.autotune = _autotune
        autotuner.Autotuner.__init__, autotuner.Autotuner.run = _subclass_init, _subclass_run


def uninstall() -> None:
    """Gives triton.autotune back to Triton (kernels decorated meanwhile stay with dr_kernel)."""
    import triton
    import triton.runtime
    import triton.runtime.autotuner as autotuner

    with _LOCK:
        original = _STATE["original"]
        if original is not None:
            triton.autotune = triton.runtime.autotune = autotuner.autotune = original
            _STATE["original"] = None
        # Instances of libraries' subclasses made meanwhile keep dr_kernel (their run is still
        # wrapped); those made from now on are Triton's.
        if _STATE["init"] is not None:
            autotuner.Autotuner.__init__ = _STATE["init"]


@contextmanager
def installed(**options):
    """install() for the duration of a `with` block."""
    install(**options)
    try:
        yield
    finally:
        uninstall()


def is_installed() -> bool:
    return _STATE["original"] is not None


def taken_over() -> list[str]:
    """module.name of every kernel decorated while installed that dr_kernel tunes."""
    return list(_TAKEN)


def kept() -> list[tuple[str, str]]:
    """(module.name, reason) of every kernel left to, or handed back to, triton.autotune."""
    return list(_KEPT)


def note_kept(name: str, reason: str) -> None:
    with _LOCK:
        if name in _TAKEN:
            _TAKEN.remove(name)
        _KEPT.append((name, reason))


def _autotune(configs, key, **kwargs):
    """What triton.autotune is while installed."""
    from .dropin import Autotuner, autotune, stock_options

    original = _STATE["original"]
    options = _STATE["options"]
    stock = original(configs, key, **stock_options(kwargs))

    def decorator(fn):
        name = _name(fn)
        try:
            kernel = autotune(configs, key, **kwargs, **options)(fn)
        except Exception as error:  # noqa: BLE001 -- the library's own autotune takes the kernel.
            reason = f"{type(error).__name__}: {error}"
            warnings.warn(f"dr_kernel: {name} stays with triton.autotune ({reason})", stacklevel=2)
            note_kept(name, reason)
            return stock(fn)
        assert isinstance(kernel, Autotuner)
        kernel.fallback = lambda: stock(fn)
        with _LOCK:
            _TAKEN.append(name)
        return kernel

    return decorator


def _subclass_init(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None, post_hook=None,
                   prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                   cache_results=False):
    """Triton's Autotuner.__init__ while installed (its signature in Triton 3.6): the library's
    subclass of Autotuner is built as it would be, then given a dr_kernel tuner of the same list,
    which its launches use (_subclass_run). Triton's own Autotuner (triton.autotune's stock
    fallback) and dr_kernel's are left alone."""
    from .tuner import TunedKernel

    _STATE["init"](self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                   post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                   use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)
    import triton.runtime.autotuner as autotuner

    if type(self) is autotuner.Autotuner or isinstance(self, TunedKernel) or not is_installed():
        return
    from .dropin import autotune

    name = f"{_name(fn)} ({type(self).__module__}.{type(self).__qualname__})"
    # A subclass that prunes, times or caches its own way would lose that to dr_kernel's tuning.
    own = [m for m in ("prune_configs", "_bench", "do_bench", "check_disk_cache")
           if getattr(type(self), m) is not getattr(autotuner.Autotuner, m)]
    if own:
        reason = f"its class has its own {', '.join(own)}, which dr_kernel's tuning would bypass"
        warnings.warn(f"dr_kernel: {name} stays with its own autotuner ({reason})", stacklevel=3)
        note_kept(name, reason)
        return
    try:
        tuner = autotune(configs, key, prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results,
                         **_STATE["options"])(fn)
    except Exception as error:  # noqa: BLE001 -- the library's own autotuner keeps the kernel.
        reason = f"{type(error).__name__}: {error}"
        warnings.warn(f"dr_kernel: {name} stays with its own autotuner ({reason})", stacklevel=3)
        note_kept(name, reason)
        return
    tuner.fallback = lambda: _OwnAutotuner(self)
    tuner.switch_name, tuner.fallback_name = name, "its own autotuner"
    self._dr_kernel = tuner
    with _LOCK:
        _TAKEN.append(name)


def _subclass_run(self, *args, **kwargs):
    """Triton's Autotuner.run while installed: for a library's subclass taken over, the launch
    goes through its dr_kernel tuner, unless the subclass has put a config for the call's key in
    its own `cache` (a config file's answer): that one is launched as Triton would launch it."""
    tuner = self.__dict__.get("_dr_kernel")
    if tuner is None:
        return _STATE["run"](self, *args, **kwargs)
    if self.cache and tuner.key_of({**dict(zip(self.arg_names, args, strict=False)), **kwargs}) in self.cache:
        return _STATE["run"](self, *args, **kwargs)
    try:
        return tuner.run(*args, **kwargs)
    finally:
        self.best_config = tuner.best_config  # What wrappers read after a launch.


class _OwnAutotuner:
    """A taken-over subclass's own tuning, for dr_kernel's hand-back: Triton's Autotuner.run on it."""

    def __init__(self, tuner):
        self.tuner = tuner

    def run(self, *args, **kwargs):
        return _STATE["run"](self.tuner, *args, **kwargs)

    @property
    def best_config(self):
        return getattr(self.tuner, "best_config", None)


def _name(fn) -> str:
    base = fn
    while hasattr(base, "fn"):
        base = base.fn
    return f"{getattr(base, '__module__', '?')}.{getattr(base, '__qualname__', getattr(base, '__name__', '?'))}"


def requested(environ=os.environ) -> bool:
    """Whether `environ` asks for the switch: DR_KERNEL_AUTOTUNE set to anything but 0/empty/off."""
    return environ.get(ENV_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def install_from_environment() -> None:
    """The start-up hook's call: install() when DR_KERNEL_AUTOTUNE is set to anything but 0/empty;
    words separated by commas choose: "widen" also searches past the lists ("narrow", the default,
    is accepted too), "isolate" measures in a measuring process wherever a kernel can go there,
    "defer" tunes each key on a later call than its first (install(defer=True))."""
    if not requested():
        return
    words = {w.strip() for w in os.environ.get(ENV_VARIABLE, "").strip().lower().split(",")}
    try:
        install(widen="widen" in words, isolate=None if "isolate" in words else False, defer="defer" in words)
    except Exception as error:  # noqa: BLE001 -- a start-up hook must never stop the program.
        warnings.warn(f"dr_kernel: {ENV_VARIABLE} is set but dr_kernel could not be installed ({error}); "
                      "triton.autotune is unchanged", stacklevel=2)
