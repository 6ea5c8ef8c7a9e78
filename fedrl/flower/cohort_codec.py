"""Cohort messages: several logical nodes' plans (or replies) in one Flower message.

A SuperNode that hosts several selected logical nodes gets one message carrying all their plans
and answers with one message carrying all their replies (``nodes.cohort-size``). Member ``j``'s
records keep their own keys behind the prefix ``"<j>."``; a ``cohort`` config record says how many
members there are and, in a reply, why a member failed (``"error.<j>"``): a node that fails
inside a cohort fails alone.

Nothing is copied to share the global weights: Flower 1.42 moves a message as content-addressed
objects (each array is an object named by the hash of its bytes), so the K members' identical
weight arrays cross the wire once. ``codec.content_bytes`` counts objects the same way, so the
recorded bytes are what crossed.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from fedrl.flower.record_fields import config_record, int_field
from fedrl.flower.safe_arrays import WireError

_COHORT = "cohort"
_ERROR = "error."


def is_cohort(rec: RecordDict) -> bool:
    return isinstance(rec.get(_COHORT), ConfigRecord)


def encode_cohort(members: list[RecordDict | str]) -> RecordDict:
    """One content for several members: each member's records, or why it failed (a reply)."""
    cr = ConfigRecord({"members": len(members)})
    out = RecordDict({_COHORT: cr})
    for j, member in enumerate(members):
        if isinstance(member, str):
            cr[f"{_ERROR}{j}"] = member
            continue
        for key, record in member.items():
            out[f"{j}.{key}"] = record
    return out


def content_of(members: list[RecordDict]) -> RecordDict:
    """A message's content for one or more logical nodes: one member's as it is, several as a cohort."""
    return members[0] if len(members) == 1 else encode_cohort(list(members))


def decode_cohort(rec: RecordDict, max_members: int) -> list[RecordDict | str]:
    """The members of a cohort content, in order: each one's records, or its error text.

    Raises:
        WireError: not a cohort, a member count outside ``1..max_members``, a key that names no
            member, or a member with neither records nor an error.
    """
    cr = config_record(rec, _COHORT)
    n = int_field(cr, "members")
    if not 1 <= n <= max_members:
        raise WireError(f"a cohort has 1 to {max_members} members, got {n}")
    parts: list[RecordDict] = [RecordDict() for _ in range(n)]
    for key, record in rec.items():
        if key == _COHORT:
            continue
        head, sep, rest = key.partition(".")
        if not sep or not head.isdigit() or int(head) >= n or not rest:
            raise WireError(f"cohort record '{key}' names no member of {n}")
        parts[int(head)][rest] = record
    out: list[RecordDict | str] = []
    for j, part in enumerate(parts):
        error = cr.get(f"{_ERROR}{j}")
        if error is not None:
            if not isinstance(error, str) or len(part):
                raise WireError(f"cohort member {j}: an error must be a string, and alone")
            out.append(error)
        elif not len(part):
            raise WireError(f"cohort member {j} carries nothing")
        else:
            out.append(part)
    return out
