"""The off-policy learners' sections of the run configuration: ``dqn.*`` and ``sac.*``.

Defaults follow RL Baselines3 Zoo's tuned DQN for CartPole-v1 where they carry over to a node
that trains ``algo.local-steps`` per round (a bounded buffer, a short warm-up, several gradient
steps per batch of env steps), with Double DQN, 3-step returns and prioritized replay on.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrl.config import checks as ck
from fedrl.config.checks import opt


@dataclass(frozen=True)
class DQNConfig:
    """DQN's own settings (``dqn.*``)."""

    lr: float = opt("dqn.lr", 1e-3, "Adam learning rate", ck.positive)
    lr_end: float = opt("dqn.lr-end", -1.0, "learning rate at the run's end, annealed linearly from dqn.lr over the "
                                            "run (-1: dqn.lr throughout)", ck.off_or_non_negative)
    gamma: float = opt("dqn.gamma", 0.99, "discount", ck.unit_closed)
    n_step: int = opt("dqn.n-step", 3, "n-step returns (1: one-step targets)", ck.positive)
    buffer_size: int = opt("dqn.buffer-size", 50_000, "replay capacity per node, in transitions", ck.positive)
    batch_size: int = opt("dqn.batch-size", 64, "transitions per gradient step", ck.positive)
    learning_starts: int = opt("dqn.learning-starts", 1_000,
                               "transitions a node collects before its first gradient step", ck.non_negative)
    train_freq: int = opt("dqn.train-freq", 64, "env steps (all of a node's envs) between training phases",
                          ck.positive)
    gradient_steps: int = opt("dqn.gradient-steps", 32, "gradient steps per training phase", ck.positive)
    target_update: int = opt("dqn.target-update", 100,
                             "gradient steps between target-network copies (with dqn.tau = 1)", ck.positive)
    tau: float = opt("dqn.tau", 1.0, "target update: 1 copies every dqn.target-update steps; below 1 is Polyak "
                                     "averaging after every gradient step", ck.unit_open_closed)
    dueling: bool = opt("dqn.dueling", False, "dueling head (value + advantage)")
    per_alpha: float = opt("dqn.per-alpha", 0.6, "prioritized replay exponent (0: uniform replay)", ck.non_negative)
    per_beta: float = opt("dqn.per-beta", 0.4, "importance-weight exponent at the start, annealed to 1 over the "
                                               "run", ck.unit_closed)
    eps_start: float = opt("dqn.eps-start", 1.0, "epsilon-greedy rate at the start of the run", ck.unit_closed)
    eps_end: float = opt("dqn.eps-end", 0.04, "epsilon-greedy rate after dqn.eps-fraction of the run",
                         ck.unit_closed)
    eps_fraction: float = opt("dqn.eps-fraction", 0.2, "fraction of the run over which epsilon decays",
                              ck.unit_closed)
    max_grad_norm: float = opt("dqn.max-grad-norm", 10.0, "gradient-norm clip", ck.positive)


@dataclass(frozen=True)
class SACConfig:
    """SAC's own settings (``sac.*``)."""

    lr: float = opt("sac.lr", 1e-3, "Adam learning rate of the actor, the critics and the temperature", ck.positive)
    gamma: float = opt("sac.gamma", 0.99, "discount", ck.unit_closed)
    tau: float = opt("sac.tau", 0.005, "Polyak rate of the target critics, after every gradient step",
                     ck.unit_open_closed)
    buffer_size: int = opt("sac.buffer-size", 50_000, "replay capacity per node, in transitions", ck.positive)
    batch_size: int = opt("sac.batch-size", 256, "transitions per gradient step", ck.positive)
    learning_starts: int = opt("sac.learning-starts", 1_000,
                               "env steps a node takes with uniform random actions before it trains", ck.non_negative)
    train_freq: int = opt("sac.train-freq", 8, "env steps (all of a node's envs) between training phases",
                          ck.positive)
    gradient_steps: int = opt("sac.gradient-steps", 8, "gradient steps per training phase", ck.positive)
    alpha: float = opt("sac.alpha", 1.0, "entropy temperature: the start with sac.autotune, else fixed", ck.positive)
    autotune: bool = opt("sac.autotune", True, "tune the temperature towards an entropy of -action_dim")
    noise_color: float = opt("sac.noise-color", 0.0, "exploration noise's colour beta, spectrum 1/f^beta over each "
                                                     "round's steps: 0 white (i.i.d.), 1 pink, 2 red; correlated noise "
                                                     "explores sparse rewards (MountainCarContinuous)", ck.non_negative)
