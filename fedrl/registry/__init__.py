"""Name registries (``algo.name`` -> an algorithm, ``strategy.name``/``topology.name`` -> a server rule).

The bottom of the package: the config takes its allowed values from here, and nothing here
imports a learner or a rule until it is first asked for one, so parsing a config (on the node
or the server) loads neither torch nor a server-side module.
"""
