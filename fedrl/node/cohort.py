"""A cohort's round: several logical nodes' pipelines, their training in one call.

Each member runs its own pipeline (``fedrl.node.pipeline``) up to training and after it; the
training of all members that got that far is one ``Algorithm.train_cohort`` call (PPO: one
vectorized pass). A member that fails fails alone: an error before training leaves it out of
the cohort's training; if the cohort's training raises, each member is trained alone so the
error stays with the member that causes it; an error after training is that member's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from fedrl.algorithms.base import CohortMember
from fedrl.node.flow import NodeUpdate, Received, RoundStart
from fedrl.node.pipeline import NodePipeline
from fedrl.node.stages import TrainLocally
from fedrl.wire import LocalResult

log = logging.getLogger("fedrl")

Outcome = NodeUpdate | Exception
T = TypeVar("T")


def run_cohort(pipelines: list[NodePipeline], starts: list[RoundStart]) -> list[Outcome]:
    """Member ``j``'s update from ``starts[j]`` through ``pipelines[j]``, or the exception that
    ended its round."""
    received = [_attempt(p.start, s) for p, s in zip(pipelines, starts, strict=True)]
    ready = [j for j, r in enumerate(received) if isinstance(r, Received)]
    trained: dict[int, LocalResult | Exception] = {}
    if ready:
        train = pipelines[ready[0]].train  # the run's algorithm, config and spec: the same for every member
        members = [pipelines[j].train.member(r) for j in ready if isinstance(r := received[j], Received)]
        try:
            trained = dict(zip(ready, train.algorithm.train_cohort(train.cfg, train.spec, members,
                                                                    dict(train.env_kwargs)), strict=True))
        except Exception as err:  # noqa: BLE001 - find the member that fails by training each alone
            log.warning("a cohort of %d failed to train together (%s: %s); training each alone", len(ready),
                        type(err).__name__, err)
            for j, m in zip(ready, members, strict=True):
                trained[j] = _attempt(_train_alone, train, m)
    out: list[Outcome] = []
    for j, (pipeline, r) in enumerate(zip(pipelines, received, strict=True)):
        result = trained.get(j)
        if isinstance(r, Exception):
            out.append(r)
        elif isinstance(result, LocalResult):
            out.append(_attempt(_finish, pipeline, r, result))
        else:
            out.append(result if result is not None else RuntimeError("not trained"))
    return out


def _train_alone(train: TrainLocally, member: CohortMember) -> LocalResult:
    return train.algorithm.train_cohort(train.cfg, train.spec, [member], dict(train.env_kwargs))[0]


def _finish(pipeline: NodePipeline, received: Received, result: LocalResult) -> NodeUpdate:
    return pipeline.finish(pipeline.train.updated(received, result))


def _attempt(fn: Callable[..., T], *args: Any) -> T | Exception:
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - one member's error is its own outcome
        return err
