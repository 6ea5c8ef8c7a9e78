"""500 generated ``--run-config`` strings through ``fedrl check``: each is accepted, and then its run
config and a plan serialize into Flower records and every node's environment builds, resets and
steps, or refused with one line naming a key; never a traceback (issue 15).

The strings mix valid values, wrong types, out-of-range and huge numbers, non-finite floats,
garbage tokens, unknown and near-miss keys, random ``env.vary`` and ``env.kwargs`` specs and
quoting errors. They are drawn from a seeded generator, so a failure names a reproducible string.
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

import pytest
from flwr.common.serde import recorddict_to_proto, user_config_to_proto

from fedrl.checks.validate import check
from fedrl.cli import main, resolved_run_config
from fedrl.compression import compressors
from fedrl.config import DEFAULTS, Config
from fedrl.envs.make import make_env
from fedrl.envs.spec import parse_kwargs
from fedrl.flower.codec import encode_plan
from fedrl.registry.algorithms import names as algorithm_names
from fedrl.registry.rules import names as rule_names
from fedrl.server.federation import Federation

REPO = Path(__file__).resolve().parents[2]
N, SEED = 500, 15

FAMILIES = {  # env id -> variant parameters and a plausible range
    "CartPole-v1": {"length": (0.2, 1.5), "masspole": (0.05, 0.5), "masscart": (0.5, 2.0), "gravity": (5, 15),
                    "force_mag": (5, 15)},
    "Pendulum-v1": {"g": (5, 15), "m": (0.5, 2), "l": (0.5, 2)},
    "Acrobot-v1": {"link_length_1": (0.5, 1.5), "link_mass_2": (0.5, 2)},
    "MountainCar-v0": {"force": (0.0005, 0.002), "gravity": (0.002, 0.004)},
}


def _choices() -> dict[str, tuple[str, ...]]:
    """Key -> allowed values of every Literal-typed key, and of the keys a registry checks."""
    out = {}
    hints = get_type_hints(Config)
    for holder in [Config, *(hints[f.name] for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name]))]:
        types = get_type_hints(holder)
        for f in dataclasses.fields(holder):
            if "key" in f.metadata and getattr(types[f.name], "__origin__", None) is Literal:
                out[f.metadata["key"]] = get_args(types[f.name])
    out["strategy.name"] = rule_names()
    out["algo.name"] = algorithm_names()
    out["compression.up"] = tuple(compressors.KINDS)
    out["compression.down"] = tuple(compressors.COMPRESSORS)
    return out


CHOICES = _choices()


class Generator:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def number(self) -> str:
        r = self.r
        return r.choice([
            str(r.randint(-3, 40)), f"{r.uniform(-2, 3):.3g}", "0", "1", "2", "0.5",
            str(10 ** r.randint(15, 30)), f"-{10 ** r.randint(18, 25)}", str(2**63 - 1), str(2**63),
            "1e308", "1e400", "inf", "-inf", "nan", "+inf", f"{r.uniform(0, 1):.2f}", "1_000", "0x10",
        ])

    def quoted(self, text: str) -> str:
        q = self.r.choice(["'", '"'])
        return f"{q}{text}{q}"

    def vary(self, env_id: str) -> str:
        r, params = self.r, FAMILIES[env_id]
        items = []
        for name in r.sample(list(params), r.randint(0, min(2, len(params)))):
            lo, hi = params[name]
            if r.random() < 0.15:  # a misspelt or foreign parameter
                name = r.choice([name[:-1], name + "x", "lenght", "g", "bogus"])
            a, b = sorted((r.uniform(lo, hi), r.uniform(lo, hi)))
            spec = r.choice([f"uniform({a:.3g}, {b:.3g})", f"loguniform({a:.3g}, {b:.3g})", f"linspace({a:.3g}, {b:.3g})",
                             f"choice({a:.3g}, {b:.3g}, {hi:.3g})", f"{a:.3g}", f"uniform({b:.3g}, {a:.3g})",
                             f"unifrom({a:.3g}, {b:.3g})", f"uniform({a:.3g})", "nan", "1e300", f"-{a:.3g}",
                             f"linspace({a:.3g}, 1e300)", "choice()", "0"])
            items.append(f"{name}={spec}")
        return "; ".join(items)

    def kwargs(self) -> str:
        r = self.r
        pool = ["max_episode_steps=" + r.choice(["0", "-1", "1", "50", "500", "1.5", "true", "x"]),
                "render_mode=" + r.choice(["human", "rgb_array", "5", "'ansi'", "None"]),
                "disable_env_checker=" + r.choice(["true", "false"]), "bogus_kw=1", "sutton_barto_reward=true",
                "max_episode_steps", "=3", "a=1;a=2"]
        return "; ".join(r.sample(pool, r.randint(1, 2)))

    def near_miss(self, key: str) -> str:
        r, i = self.r, self.r.randrange(len(key))
        return r.choice([key[:i] + key[i + 1:], key[:i] + key[i] * 2 + key[i + 1:], key.replace(".", "-"),
                         key.upper(), key + "s"])

    def value_for(self, key: str) -> str:
        r, default = self.r, DEFAULTS[key]
        if r.random() < 0.2:  # a wrong type
            return r.choice([self.number(), "true", self.quoted("text"), self.quoted(""), "[1, 2]"])
        if key in CHOICES:
            return self.quoted(r.choice([*CHOICES[key], "bogus"]))
        if isinstance(default, bool):
            return r.choice(["true", "false", "True", "1"])
        if isinstance(default, int):
            return r.choice([str(default), str(r.randint(0, 20)), self.number()])
        if isinstance(default, float):
            return r.choice([repr(default), f"{r.uniform(0, 1):.3g}", self.number()])
        if key == "algo.hidden":
            return self.quoted(r.choice(["64,64", "32", "16,16,16", "0", "a,b", "100000,100000", "8,", "-4"]))
        return self.quoted(r.choice([default, "x", "", "1,2", "true", "none", "auto"]))

    def token(self) -> str:
        r = self.r
        kind = r.random()
        if kind < 0.30:
            key = r.choice([k for k in DEFAULTS if not k.startswith(("env.", "output-dir", "resume"))])
            return f"{key}={self.value_for(key)}"
        if kind < 0.45:
            return f"env.kwargs={self.quoted(self.kwargs())}"
        if kind < 0.55:
            return r.choice(["num-server-rounds=" + self.number(), "seed=" + self.number(),
                             "nodes.count=" + r.choice(["1", "2", "3", "8", "16", "0", "10001", str(10**12)])])
        if kind < 0.65:
            return r.choice(["garbage", "num-server-rounds=", "=3", "a=b=c", "seed=1#2", "seed=1 2", "'x'",
                             "run-name='a'seed=2", "--flag", "key:1", "seed==1"])
        if kind < 0.75:
            key = self.near_miss(r.choice(list(DEFAULTS)))
            return f"{key}={self.value_for(key) if key in DEFAULTS else self.number()}"
        if kind < 0.85:  # quoting errors
            text = f"env.vary={self.quoted(self.vary('CartPole-v1'))}"
            return r.choice([text[:-1], text.replace("'", '"', 1), text + "'", "env.vary=length=uniform(0.2, 0.5)"])
        return f"env.vary={self.quoted(self.vary('CartPole-v1'))}"

    def plausible(self) -> str:
        """A token that is valid on its own (combinations may still be refused)."""
        r = self.r
        key = r.choice(["num-server-rounds", "seed", "nodes.count", "fraction-train", "algo.hidden", "ppo.lr",
                        "strategy.name", "compression.up", "compression.down", "algo.norm-obs", "eval.episodes",
                        "selection.name", "topology.name", "env.kwargs", "env.vary", "strategy.server-lr"])
        if key in CHOICES:
            return f"{key}={self.quoted(r.choice(CHOICES[key]))}"
        value = {"num-server-rounds": str(r.choice([1, 5, 30, 2**62])), "seed": str(r.choice([0, 7, 2**63 - 1])),
                 "nodes.count": str(r.choice([1, 2, 4, 8, 16])), "fraction-train": f"{r.uniform(0.1, 1):.2f}",
                 "algo.hidden": self.quoted(r.choice(["64,64", "32", "16,16,16", "8,8"])),
                 "ppo.lr": f"{r.uniform(1e-4, 1e-2):.2g}", "eval.episodes": str(r.randint(1, 10)),
                 "env.kwargs": self.quoted(r.choice(["max_episode_steps=100", "render_mode='rgb_array'",
                                                     "disable_env_checker=true", ""])),
                 "env.vary": self.quoted(r.choice(["length=uniform(0.3, 0.9)", "masspole=choice(0.1, 0.2)",
                                                   "length=linspace(0.4, 1.2); gravity=9.8", ""])),
                 "strategy.server-lr": f"{r.uniform(0.5, 2):.2g}"}[key]
        return f"{key}={value}"

    def run_config(self) -> str:
        r = self.r
        if r.random() < 0.4:
            keys: dict[str, str] = {}
            for token in (self.plausible() for _ in range(r.randint(1, 3))):
                keys[token.split("=", 1)[0]] = token  # one value per key: TOML refuses duplicates
            return " ".join(keys.values())
        tokens = [self.token() for _ in range(r.randint(1, 4))]
        if r.random() < 0.25:  # another family, with its own parameters
            env_id = r.choice(list(FAMILIES))
            tokens.append(f"env.id={self.quoted(env_id)} env.vary={self.quoted(self.vary(env_id))}")
        return r.choice([" ", "  ", " \t"]).join(tokens)


_built: dict[tuple[Any, ...], None] = {}


def _step_every_variant(fed: Federation) -> None:
    """Every node's environment builds, resets and steps once (cached by env spec: the costly part)."""
    cfg = fed.cfg
    kwargs = dict(parse_kwargs(cfg.env.kwargs))
    for variant in fed.variants:
        key = (cfg.env.id, tuple(sorted(variant.items())), tuple(sorted(kwargs.items())))
        if key in _built:
            continue
        env = make_env(cfg.env.id, variant, dict(kwargs))
        try:
            env.reset(seed=0)
            env.step(env.action_space.sample())
        finally:
            env.close()
        _built[key] = None


def _accepted(text: str) -> None:
    """What an accepted string must allow: Flower carries its run config and a plan; the envs run."""
    run_config = resolved_run_config([str(REPO), "--run-config", text])
    user_config_to_proto(run_config)  # Flower's copy of the run config (sint64 ints, UTF-8 strings)
    cfg = check(run_config)
    fed = Federation(cfg)
    rnd = 1
    fed.begin_round(rnd)
    for node in fed.select(rnd):
        recorddict_to_proto(encode_plan(*fed.plan(node, rnd)))
    _step_every_variant(fed)


def test_500_generated_run_configs_are_accepted_and_usable_or_refused_naming_a_key(
        capsys: pytest.CaptureFixture[str]) -> None:
    gen, start = Generator(SEED), time.perf_counter()
    accepted = refused = 0
    for i in range(N):
        text = gen.run_config()
        try:
            rc = main(["check", str(REPO), "--run-config", text])
            out, err = capsys.readouterr()
            assert "Traceback" not in out + err
            if rc == 0:
                assert out == "fedrl: run config OK\n"
                _accepted(text)
                accepted += 1
                continue
            assert rc == 2 and out == "" and len(err.splitlines()) == 1, (rc, out, err)
            prefix = "fedrl: invalid run config: "
            assert err.startswith(prefix), err
            named = err[len(prefix):].split(": ", 1)[0]
            written = {t.split("=", 1)[0] for t in text.split()}
            assert named in DEFAULTS or named == "--run-config" or named in written, err
            refused += 1
        except Exception as exc:  # noqa: BLE001 - report the generated string that broke it
            pytest.fail(f"string {i} {text!r}: {type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - start
    print(f"{N} run configs: {accepted} accepted, {refused} refused, {elapsed:.1f} s")
    assert accepted >= 100 and refused >= 200  # both outcomes are exercised: the test is not vacuous
