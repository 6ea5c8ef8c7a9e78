"""The model as data both sides share: its flat layout (``layout``) and observation statistics (``moments``).

The bottom of the package, with ``fedrl.wire``: it imports nothing of fedrl above numpy.
"""
