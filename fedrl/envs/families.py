"""Environment families: which physical parameters of a Gymnasium env a node may vary.

A :class:`Family` knows, for a set of env ids, the parameter names ``env.vary`` may use,
the attribute each maps to on ``env.unwrapped``, and the derived quantities that must be
recomputed after a change (CartPole's ``polemass_length``, Pendulum's action bounds, ...).
Any other registered id gets the *generic* family: every public int/float attribute of
``env.unwrapped`` is a parameter, nothing is derived.

Parameters are always set on the env *instance* (never on its class), so variants in one
process cannot leak into each other.
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fedrl.envs.mountain_car import GravityMountainCarContinuous
from fedrl.errors import ConfigError

Env = gym.Env[Any, Any]


@dataclass(frozen=True)
class Family:
    """A group of env ids sharing variable physical parameters.

    ``params`` are the names ``env.vary`` may use (empty for the generic family, where the
    allowed names are the env's numeric attributes, see :meth:`allowed`); ``attrs`` maps a
    param to its attribute on ``env.unwrapped`` (identity when absent); ``positive`` lists
    params that must be > 0 (masses, lengths, gravity); ``derive`` recomputes derived
    quantities on ``env.unwrapped`` after a change; ``entry_point`` replaces the registered
    constructor when the stock env cannot honour a parameter (see ``make_env``).
    """

    name: str
    env_ids: tuple[str, ...]
    params: tuple[str, ...]
    attrs: dict[str, str] = field(default_factory=dict, hash=False)
    positive: tuple[str, ...] = ()
    derive: Callable[[Any], None] | None = None
    entry_point: type[Env] | None = None

    @property
    def generic(self) -> bool:
        """True for the fallback family of ids without a named family."""
        return not self.params

    def allowed(self, env: Env) -> tuple[str, ...]:
        """Parameter names valid for ``env`` (``params``, or the generic numeric attributes)."""
        return numeric_attributes(env.unwrapped) if self.generic else self.params

    def defaults(self, env: Env) -> dict[str, float]:
        """Current values of every allowed parameter of ``env`` (before or after ``apply``)."""
        base = env.unwrapped
        return {p: float(getattr(base, self.attrs.get(p, p))) for p in self.allowed(env)}

    def apply(self, env: Env, params: dict[str, float], key: str = "env.vary") -> None:
        """Set ``params`` on ``env.unwrapped`` and recompute derived quantities.

        Validates first, so on error ``env`` is unchanged: an unknown name, a non-finite
        value, a non-positive value for a ``positive`` param or a non-integral value for an
        int attribute raises :class:`ConfigError` naming ``key``. Mutates ``env`` (it is the
        object being configured); does not mutate ``params``.
        """
        base = env.unwrapped
        env_id = base.spec.id if base.spec is not None else type(base).__name__
        if params and self.entry_point is not None and not isinstance(base, self.entry_point):
            raise TypeError(
                f"{env_id}: family '{self.name}' needs an env built by fedrl.envs.make_env "
                f"({self.entry_point.__name__}); the stock class ignores some parameters"
            )
        _check_names(env_id, params, self.allowed(env), key)
        _check_values(env_id, params, self.positive, key)
        values: dict[str, float | int] = {}
        for name, value in params.items():
            attr = self.attrs.get(name, name)
            if self.generic and _is_int(inspect.getattr_static(base, attr)):
                if not float(value).is_integer():
                    raise ConfigError(key, f"{env_id}.{name} is an integer; got {value!r}")
                values[attr] = int(value)
            else:
                values[attr] = float(value)
        for attr, value in values.items():
            setattr(base, attr, value)
        if self.derive is not None:
            self.derive(base)


def numeric_attributes(obj: object) -> tuple[str, ...]:
    """Public, settable int/float (not bool) attributes of ``obj``, sorted.

    Uses ``inspect.getattr_static`` so properties are neither evaluated (``np_random`` would
    seed itself as a side effect) nor offered (most cannot be set).
    """
    names = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        if _is_int(value := inspect.getattr_static(obj, name)) or _is_float(value):
            names.append(name)
    return tuple(sorted(names))


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float(value: object) -> bool:
    return isinstance(value, (float, np.floating))


# --- named families -----------------------------------------------------------------


def _cartpole_derive(env: Any) -> None:
    # step() reads these cached products, not the masses/length directly.
    env.total_mass = env.masspole + env.masscart
    env.polemass_length = env.masspole * env.length


def _pendulum_derive(env: Any) -> None:
    # step() clips to max_torque; the action space must say so, or agents scale wrongly.
    # Wrappers made by gym.make read the unwrapped action_space unless they override it.
    bound = float(env.max_torque)
    env.action_space = gym.spaces.Box(low=-bound, high=bound, shape=(1,), dtype=np.float32)


def _acrobot_derive(env: Any) -> None:
    # _dsdt reads the centre-of-mass positions (LINK_COM_POS_i), and never LINK_LENGTH_2,
    # so link_length_2 only acts through LINK_COM_POS_2. Uniform links: COM at half length.
    # LINK_MOI stays 1.0 as in gymnasium, and _terminal() keeps its unit-length goal height.
    env.LINK_COM_POS_1 = env.LINK_LENGTH_1 / 2
    env.LINK_COM_POS_2 = env.LINK_LENGTH_2 / 2


CARTPOLE = Family(
    name="cartpole",
    env_ids=("CartPole-v1", "CartPole-v0"),
    params=("length", "masspole", "masscart", "gravity", "force_mag"),
    # force_mag may be 0 (no control) or negative (mirrored controls).
    positive=("length", "masspole", "masscart", "gravity"),
    derive=_cartpole_derive,
)
# Every Pendulum and Acrobot parameter is a magnitude (gravity, mass, length, torque bound): all must be > 0.
_PENDULUM = ("g", "m", "l", "max_torque")
PENDULUM = Family(name="pendulum", env_ids=("Pendulum-v1",), params=_PENDULUM, positive=_PENDULUM,
                  derive=_pendulum_derive)
_ACROBOT = ("link_length_1", "link_length_2", "link_mass_1", "link_mass_2")
ACROBOT = Family(name="acrobot", env_ids=("Acrobot-v1",), params=_ACROBOT, positive=_ACROBOT,
                 attrs={p: p.upper() for p in _ACROBOT}, derive=_acrobot_derive)
MOUNTAIN_CAR = Family(
    name="mountain_car",
    env_ids=("MountainCar-v0",),
    params=("force", "gravity"),
)
MOUNTAIN_CAR_CONTINUOUS = Family(
    name="mountain_car_continuous",
    env_ids=("MountainCarContinuous-v0",),
    params=("power", "gravity"),
    entry_point=GravityMountainCarContinuous,
)
NAMED_FAMILIES = (CARTPOLE, PENDULUM, ACROBOT, MOUNTAIN_CAR, MOUNTAIN_CAR_CONTINUOUS)
GENERIC = Family(name="generic", env_ids=(), params=())


def family_for(env_id: str) -> Family:
    """The named family containing ``env_id``, else the generic family."""
    for family in NAMED_FAMILIES:
        if env_id in family.env_ids:
            return family
    return GENERIC


# --- config-time checks -----------------------------------------------------------------


def check_env_id(env_id: str, key: str = "env.id") -> None:
    """Raise :class:`ConfigError` if ``env_id`` is not in ``gymnasium.registry``."""
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ConfigError(
        key, f"'{env_id}' is not a registered Gymnasium id{hint}; see gymnasium.pprint_registry()"
    )


def check_params(env_id: str, names: Iterable[str], key: str = "env.vary") -> None:
    """Raise :class:`ConfigError` if any of ``names`` is not a parameter of ``env_id``.

    The message names the key, the parameter, the allowed names and close matches. For
    the generic family the env is built once (and closed) to list its numeric attributes.
    """
    check_env_id(env_id)
    family = family_for(env_id)
    if family.generic:
        try:
            env = gym.make(env_id)
        except Exception as err:  # any constructor failure (missing extra, bad id args)
            raise ConfigError("env.id", f"cannot build '{env_id}': {err}") from err
        try:
            allowed = family.allowed(env)
        finally:
            env.close()
    else:
        allowed = family.params
    _check_names(env_id, names, allowed, key)


def _check_names(env_id: str, names: Iterable[str], allowed: tuple[str, ...], key: str) -> None:
    for name in names:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        listed = ", ".join(allowed) if allowed else "(none)"
        raise ConfigError(key, f"{env_id} has no parameter '{name}'; allowed: {listed}{hint}")


def check_values(env_id: str, params: dict[str, float], key: str = "env.vary") -> None:
    """Raise :class:`ConfigError` for a non-finite value, or a value <= 0 for a parameter
    that must be positive in ``env_id``'s family (masses, lengths, gravity, torque bound).

    Names are not checked here (see :func:`check_params`).
    """
    _check_values(env_id, params, family_for(env_id).positive, key)


def _check_values(
    env_id: str, params: dict[str, float], positive: tuple[str, ...], key: str
) -> None:
    for name, value in params.items():
        if not math.isfinite(value):
            raise ConfigError(key, f"{env_id} parameter '{name}' must be finite, got {value!r}")
        if name in positive and not value > 0:
            raise ConfigError(key, f"{env_id} parameter '{name}' must be > 0, got {value!r}")
