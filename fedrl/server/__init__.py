"""The server side of a federation, without Flower.

``Federation`` (``federation``) builds the components a run uses once from the config and
coordinates them: selection, the plan, the reply checks (``guards``), the rule's aggregation,
privacy, the model guard, evaluation and the run's record (``rundir``, ``snapshot``). One round
function drives them in that order for every transport (``round.play_round``), with what the
transport brought back (``delivery``). Nothing outside this package reads a component of
``Federation``; the Flower side (``fedrl.flower``) only moves its plans and replies.
"""
