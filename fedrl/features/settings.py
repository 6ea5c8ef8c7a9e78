"""Settings other features' rules refer to, with no rules of their own; what they read."""

from __future__ import annotations

from fedrl.config import Config, node_statistics_travel
from fedrl.features.compat import Feature, Rule, setting, value

NORM_OBS_ON = "observation normalization on (algo.norm-obs; auto is on for continuous actions)"


def continuous_actions(cfg: Config) -> bool:
    """Whether ``env.id`` has continuous (Box) actions: builds one environment."""
    import gymnasium as gym

    from fedrl.envs.make import make_env  # here: it loads torch, which check --list does not need
    from fedrl.envs.spec import parse_kwargs

    env = make_env(cfg.env.id, {}, dict(parse_kwargs(cfg.env.kwargs)))
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


def _normalizes(key: str) -> Feature:
    """``algo.norm-obs``/``algo.norm-reward`` on (``auto`` builds the env: on for continuous actions)."""
    return Feature(key.removeprefix("algo."), key, f"{key} = on, or auto with continuous actions",
                   lambda cfg: node_statistics_travel(value(cfg, key), value(cfg, key) == "auto" and continuous_actions(cfg)))


# algo.norm-obs = server (fedrl.rl.obs_stats): the server keeps one set of statistics, of the model the
# run stands for (the global model, or the hierarchy's cloud model, shared by every edge), and nodes
# send none, so it works wherever there is such a model.
_SERVER_STATISTICS = setting("norm-obs-server", "algo.norm-obs", "server", excludes=(
    Rule(("gossip", "local"), "algo.norm-obs", "the server keeps statistics of one global model only",
         lambda cfg: "algo.norm-obs = server keeps the statistics of one global model, which "
                     f"topology.name = {cfg.topology.name} with strategy.name = {cfg.strategy.name} does not have; "
                     "use the star or hierarchical topology with a shared model, or algo.norm-obs = off"),
    Rule(("dpsgd",), "algo.norm-obs", "a node's normalizer still adapts to its own samples during the round",
         lambda cfg: "algo.norm-obs = server with privacy.dpsgd: a node's normalizer still adapts to its own samples "
                     "during the round, outside the clipped gradients; set algo.norm-obs = off"),
))


SETTINGS = (
    Feature("uplink-compression", "compression.up", "compression.up is not none",
            lambda cfg: cfg.compression.up != "none"),
    Feature("downlink-compression", "compression.down", "compression.down is not none",
            lambda cfg: cfg.compression.down != "none"),
    setting("error-feedback", "compression.error-feedback", "on"),
    setting("ef21", "compression.error-feedback", "ef21"),
    _normalizes("algo.norm-obs"),
    _SERVER_STATISTICS,
    _normalizes("algo.norm-reward"),
    Feature("fraction-train", "fraction-train", "fraction-train < 1", lambda cfg: cfg.fraction_train < 1),
    Feature("partial-rounds", "fraction-train", "fewer than nodes.count nodes train each round (fraction-train, "
            "min-train-nodes)", lambda cfg: cfg.nodes_per_round < cfg.nodes.count),
    setting("round-robin-selection", "selection.name", "round-robin"),
    setting("poisson-selection", "selection.name", "poisson", excludes=(Rule(
        ("privacy-distributed",), "selection.name", "each node's noise share is sized for a fixed number of nodes",
        lambda cfg: "selection.name = poisson with privacy.mode = distributed: each node's noise share is sized for "
                    "a fixed number of nodes per round; use uniform selection, or privacy.mode = central"),)),
    Feature("cohorts", "nodes.cohort-size", "nodes.cohort-size > 1", lambda cfg: cfg.nodes.cohort_size > 1),
    setting("mirror", "algo.mirror", True, excludes=(Rule(
        ("dpsgd",), "algo.mirror", "Opacus clips per sample, and the symmetric policy runs each sample twice",
        lambda cfg: "algo.mirror with privacy.dpsgd: the symmetric policy runs every layer on each sample and on its "
                    "mirror, and Opacus' per-sample clipping does not follow a layer used twice; set "
                    "algo.mirror = false"),)),
)
