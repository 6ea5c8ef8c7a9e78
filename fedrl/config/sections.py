"""The sections of the run configuration that describe the experiment: environment, algorithm,
evaluation, nodes, rounds, selection and attacks (``fedrl.config.features`` has the update
features; ``fedrl.config`` parses them). Each field's metadata holds its run-config key, a
one-line help and a range check (``opt``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedrl.config import checks as ck
from fedrl.config.checks import opt
from fedrl.inject.attacks import check_names
from fedrl.registry.algorithms import check_name


@dataclass(frozen=True)
class EnvConfig:
    id: str = opt("env.id", "CartPole-v1", "any registered Gymnasium id")
    vary: str = opt(
        "env.vary", "length=linspace(0.4, 1.2)",
        "how parameters differ across nodes: 'param=spec; ...' (number, uniform, loguniform, linspace, choice)",
    )
    kwargs: str = opt("env.kwargs", "", "'name=value; ...' passed to gym.make")



@dataclass(frozen=True)
class AlgoConfig:
    """What every algorithm shares (``algo.*``); each algorithm's own knobs are its own section (``ppo.*``)."""

    name: str = opt("algo.name", "ppo", "local RL algorithm (fedrl.algorithms registry)", check_name)
    local_steps: int = opt("algo.local-steps", "auto",
                           "env steps per node per round; auto: 1024, and 256 for sac (shorter rounds keep the "
                           "nodes' actors from drifting apart: docs/algorithms.md, 'Round length')", ck.positive,
                           auto=True)
    num_envs: int = opt("algo.num-envs", 8, "parallel envs per node (gymnasium.vector)", ck.positive)
    hidden: str = opt("algo.hidden", "64,64", "hidden layer sizes", ck.hidden)
    norm_obs: Literal["auto", "on", "off", "server"] = opt(
        "algo.norm-obs", "auto",
        "running observation normalization with federated statistics (auto: on; off for dqn and sac; server where nodes "
        "cannot send statistics, with secagg, privacy or hierarchical (ppo, not with privacy.dpsgd or strategy.name = local); "
        "with gossip or privacy.dpsgd on for continuous actions only); server: "
        "statistics of the server's own rollouts of the global policy on the nodes' variants, so no node sends any "
        "(works with secagg and privacy; ppo, star or hierarchical topology: the cloud model's statistics, shared by the edges)")
    norm_obs_center: bool = opt(
        "algo.norm-obs-center", True,
        "subtract the statistics' mean (false: divide by the root mean square about zero only, so a mean that "
        "drifts with the policy cannot become a bias; docs/privacy.md, 'Uncentred observation statistics')")
    mirror: bool = opt(
        "algo.mirror", False,
        "a mirror-symmetric policy for environments symmetric under reflection (CartPole, Pendulum, Acrobot): a "
        "mirrored observation gets the mirrored action, so no side is preferred (ppo; needs algo.norm-obs = off or "
        "algo.norm-obs-center = false; docs/privacy.md, 'Mirror-symmetric policies')")
    norm_reward: Literal["auto", "on", "off"] = opt(
        "algo.norm-reward", "auto", "reward scaling by return std (auto: on for ppo, off for dqn and sac; with privacy.dpsgd, "
        "on for continuous actions only, which the DP-SGD check refuses)")

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.hidden.split(",") if s.strip())


@dataclass(frozen=True)
class PPOConfig:
    """PPO's own settings (``ppo.*``; CleanRL's ``ppo.py`` defaults, tuned for CartPole)."""

    num_steps: int = opt("ppo.num-steps", 32, "steps per env per PPO rollout", ck.positive)
    lr: float = opt("ppo.lr", 2.5e-3, "Adam learning rate", ck.positive)
    anneal_lr: bool = opt("ppo.anneal-lr", True, "anneal lr linearly to 0 over the whole run")
    gamma: float = opt("ppo.gamma", 0.99, "discount", ck.unit_closed)
    gae_lambda: float = opt("ppo.gae-lambda", 0.95, "GAE lambda", ck.unit_closed)
    num_minibatches: int = opt("ppo.num-minibatches", 4, "minibatches per epoch", ck.positive)
    update_epochs: int = opt("ppo.update-epochs", 4, "epochs per PPO update", ck.positive)
    norm_adv: bool = opt("ppo.norm-adv", True, "normalize advantages per minibatch")
    clip_coef: float = opt("ppo.clip-coef", 0.2, "surrogate clipping epsilon", ck.positive)
    clip_vloss: bool = opt("ppo.clip-vloss", True, "clip the value loss")
    ent_coef: float = opt("ppo.ent-coef", 0.0, "entropy bonus coefficient", ck.non_negative)
    vf_coef: float = opt("ppo.vf-coef", 0.5, "value loss coefficient", ck.non_negative)
    max_grad_norm: float = opt("ppo.max-grad-norm", 0.5, "gradient-norm clip", ck.positive)
    target_kl: float = opt("ppo.target-kl", 0.0, "stop epochs past this KL (0: off)", ck.non_negative)
    ent_floor: float = opt(
        "ppo.ent-floor", 0.0,
        "entropy floor: each state's policy is held at >= this fraction of the uniform policy's entropy log(n) by a "
        "hinge penalty (discrete actions; not applied to Gaussian policies; 0: off; docs/algorithms.md, 'Entropy "
        "floor')", ck.off_or_unit_open)


@dataclass(frozen=True)
class EvalConfig:
    every: int = opt("eval.every", 1, "evaluate the server model every N rounds (0: only at the end)", ck.non_negative)
    episodes: int = opt("eval.episodes", 5, "episodes per variant", ck.positive)
    target_return: str = opt(
        "eval.target-return", "auto", "return that counts as solved: auto (env threshold), none or a number", ck.target)
    stop_at_target: bool = opt("eval.stop-at-target", False, "end the run once every variant reaches the target")
    held_out: int = opt("eval.held-out", 0, "also evaluate on N variants no node trains on, drawn from env.vary "
                        "(0: off)", ck.held_out)
    nodes: int = opt("eval.nodes", 0, "evaluate on N of the nodes' variants, a sample drawn by seed and kept for the "
                     "whole run (0: every node's variant; for large federations)", ck.non_negative)



@dataclass(frozen=True)
class NodesConfig:
    count: int = opt("nodes.count", 8, "federation size: one environment variant per node", ck.node_count)
    wait_s: float = opt("nodes.wait-s", 120.0, "how long the server waits for nodes to connect", ck.positive)
    dropout_prob: float = opt("nodes.dropout-prob", 0.0,
                              "experiments: probability that a node fails to answer, seeded by (seed, round, node)",
                              ck.unit_closed)
    speed: str = opt("nodes.speed", "1",
                     "experiments: per-node slowdown factor >= 1 (a number, uniform(a, b), loguniform(a, b), "
                     "linspace(a, b), choice(...) drawn by seed and node, or one factor per node, e.g. '1,1,4'); a "
                     "node sleeps (slowdown - 1) x its training time before replying")
    dropout_stage: Literal["train", "advertise", "share", "mask", "unmask", "any"] = opt(
        "nodes.dropout-stage", "any",
        "where injected dropouts happen: train, or a secure-aggregation stage (advertise: the keys request, or "
        "the train reply when keys were sent ahead); any: a seeded random stage")
    cohort_size: int = opt("nodes.cohort-size", 1,
                           "logical nodes per train message to one SuperNode, trained in one vectorized pass where the "
                           "algorithm has one (PPO on the classic-control families): 1 sends each node its own "
                           "message; N > 1 up to N of the selected nodes a SuperNode hosts (bounds its memory)",
                           ck.positive)



@dataclass(frozen=True)
class LogConfig:
    tensorboard: bool = opt("log.tensorboard", False,
                            "also write each metrics row as TensorBoard scalars to <run folder>/tensorboard (by round, "
                            "and by env steps in its env_steps run), with the config as hyperparameters; the server "
                            "writes them, nodes send nothing. Needs pip install -e \".[tensorboard]\"")


@dataclass(frozen=True)
class RoundConfig:
    deadline_s: float = opt("round.deadline-s", 0.0,
                            "a train reply later than this many seconds after its plan went out is dropped from "
                            "the round (0: wait up to round.timeout-s)", ck.non_negative)
    timeout_s: float = opt("round.timeout-s", 600.0,
                           "a node silent this long after its plan went out (a straggler, a dead SuperNode) is "
                           "dropped from the round and logged; the round goes on with the replies it has", ck.positive)



@dataclass(frozen=True)
class SelectionConfig:
    name: Literal["uniform", "round-robin", "deadline", "poisson"] = opt(
        "selection.name", "uniform",
        "which fraction-train of the nodes train each round: uniform (drawn by seed and round), round-robin "
        "(in turn, so every node trains equally often), deadline (the nodes least likely to miss "
        "round.deadline-s, learned from their history, with a little exploration) or poisson (each node "
        "independently with probability fraction-train, drawn from the OS's randomness: the sampling DP "
        "accountants assume, so client-level DP claims amplification by sampling)")



@dataclass(frozen=True)
class AttackConfig:
    name: str = opt(
        "attack.name", "none",
        "experiments: Byzantine nodes send sign-flip (-scale x their update) or gaussian (N(0, scale^2) noise) "
        "instead of their update, or random-action (train on rollouts of random actions, as in FedPG-BR); "
        "hostile replies: huge-weights, nan-weights, lie-steps, bad-moments, wrong-node, wrong-shape, bad-dtype, "
        "bad-stype, npy-bomb, topk-overflow (fedrl/inject/attacks.py); a comma-separated list gives the attack.nodes "
        "their kinds in order", check_names)
    fraction: float = opt("attack.fraction", 0.0, "fraction of nodes that attack (chosen by seed)", ck.unit_closed)
    nodes: str = opt("attack.nodes", "", "explicit attacking nodes, e.g. '0,3' (overrides attack.fraction)")
    scale: float = opt("attack.scale", 1.0, "sign-flip factor, or gaussian std", ck.positive)



def norm_on(setting: str, continuous: bool) -> bool:
    """Whether an ``algo.norm-obs``/``algo.norm-reward`` setting is on (``server``: nodes normalize with the
    server's statistics; ``auto``: for continuous actions;
    ``from_run_config`` has already turned ``algo.norm-obs = auto`` into ``on`` where it can be)."""
    return setting in ("on", "server") or (setting == "auto" and continuous)


def node_statistics_travel(setting: str, continuous: bool) -> bool:
    """Whether nodes send statistics under an ``algo.norm-obs``/``algo.norm-reward`` setting: it is
    on and the nodes gather them (``server``: the server does, and nodes send none)."""
    return setting != "server" and norm_on(setting, continuous)

