"""One cohort message through the real ClientApp handler (issue 16, item 3).

Four logical nodes hosted by one SuperNode get one message carrying their four plans; the
handler trains them in one vectorized pass and answers with one message carrying four replies;
the server splits it (``transport.split_answers``) and checks each reply as it checks any. The
cohort's replies equal the replies of the same nodes trained one message each (within float
rounding: ``test_cohort_training``), its plan message is smaller than four plan messages (the
shared weights cross once), and a member that fails gives the others their replies.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedrl.config import DEFAULTS, from_run_config
from fedrl.flower import codec
from fedrl.flower.client import handle_train
from fedrl.flower.cohort_codec import decode_cohort, encode_cohort
from fedrl.flower.safe_arrays import WireError
from fedrl.flower.transport import Answer, check_reply, split_answers
from fedrl.server.federation import Federation
from fedrl.wire import Reply
from tests.inprocess import task  # noqa: F401 - the fixture

RUN = {"nodes.count": 4, "algo.local-steps": 256, "algo.num-envs": 4, "num-server-rounds": 2, "eval.episodes": 1,
       "nodes.cohort-size": 4}


def _context(node: int, state: RecordDict) -> Context:
    return Context(run_id=5, node_id=9, node_config={"partition-id": 0, "num-partitions": 1}, state=state,
                   run_config={**DEFAULTS, **RUN})


def _plans(fed: Federation, rnd: int) -> dict[int, RecordDict]:
    fed.begin_round(rnd)
    return {node: codec.encode_plan(*fed.plan(node, rnd)) for node in range(4)}


@pytest.mark.usefixtures("task")
def test_a_cohort_message_trains_its_nodes_as_single_messages_do() -> None:
    fed = Federation(from_run_config(RUN))
    plans = _plans(fed, 1)
    state = RecordDict()
    cohort = Message(encode_cohort(list(plans.values())), dst_node_id=9, message_type=codec.TRAIN)
    single_bytes = sum(codec.content_bytes(p) for p in plans.values())
    assert codec.content_bytes(cohort.content) < 0.5 * single_bytes  # the global weights crossed once
    answers = split_answers(handle_train(cohort, _context(0, state)), list(plans))
    together = {n: check_reply(fed, a, n) for n, a in answers.items()}
    alone = {}
    for node, plan in plans.items():
        reply = handle_train(Message(plan, dst_node_id=9, message_type=codec.TRAIN), _context(node, RecordDict()))
        alone[node] = check_reply(fed, Answer.of(reply), node)
    for node in plans:
        a, b = alone[node], together[node]
        assert isinstance(a, Reply) and isinstance(b, Reply), (a, b)
        assert a.env_steps == b.env_steps == 256
        for x, y in zip(a.weights, b.weights, strict=True):
            assert float(np.linalg.norm(x - y)) <= 1e-4 * max(float(np.linalg.norm(x)), 1e-6)
    # every member's state is its own record in the SuperNode's context.state
    assert all(codec.load_node_state(state, n).arrays for n in plans)


@pytest.mark.usefixtures("task")
def test_a_failing_member_fails_alone() -> None:
    fed = Federation(from_run_config(RUN))
    plans = _plans(fed, 1)
    broken = RecordDict({"plan": ConfigRecord({"node": 99})})  # a plan the node cannot follow
    contents = [plans[0], broken, plans[2], plans[3]]
    reply = handle_train(Message(encode_cohort(contents), dst_node_id=9, message_type=codec.TRAIN),
                         _context(0, RecordDict()))
    answers = split_answers(reply, [0, 1, 2, 3])
    checked = {n: check_reply(fed, a, n) for n, a in answers.items()}
    assert isinstance(checked[0], Reply) and isinstance(checked[2], Reply) and isinstance(checked[3], Reply)
    assert isinstance(checked[1], str) and checked[1].startswith("client error: ")


def test_cohort_records_are_decoded_by_checked_rules() -> None:
    plan = RecordDict({"plan": ConfigRecord({"node": 1})})
    assert [m["plan"]["node"] for m in decode_cohort(encode_cohort([plan, plan]), 4)] == [1, 1]  # type: ignore[index]
    assert decode_cohort(encode_cohort([plan, "boom"]), 4)[1] == "boom"
    with pytest.raises(WireError, match="1 to 2 members"):
        decode_cohort(encode_cohort([plan] * 3), 2)
    bad = encode_cohort([plan])
    bad["7.plan"] = ConfigRecord({"node": 2})
    with pytest.raises(WireError, match="names no member"):
        decode_cohort(bad, 4)
    empty = encode_cohort([plan, plan])
    del empty["1.plan"]
    with pytest.raises(WireError, match="carries nothing"):
        decode_cohort(empty, 4)


@pytest.mark.usefixtures("task")
def test_a_malformed_cohort_reply_leaves_its_members_out() -> None:
    request = Message(RecordDict(), dst_node_id=9, message_type=codec.TRAIN)
    reply = Message(RecordDict({"cohort": ConfigRecord({"members": 5})}), reply_to=request)
    answers = split_answers(reply, [0, 1])
    assert all(a is not None and a.why is not None and a.why.startswith("malformed cohort reply") for a in
               answers.values())
