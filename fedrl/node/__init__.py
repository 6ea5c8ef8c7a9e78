"""A node's training round as an ordered pipeline, with no Flower import.

``receive -> train -> attack -> privatize -> encode``: the stages (``fedrl.node.stages``) and
which variant of each a node runs are chosen once from the run config (``build_pipeline``);
what flows between them is typed (``fedrl.node.flow``). The ClientApp (``fedrl.flower.client``)
only decodes the plan, loads the node's state, runs the pipeline, stores the state and encodes
the reply.
"""

from fedrl.node.flow import NodeUpdate, Received, RoundStart
from fedrl.node.pipeline import NodePipeline, build_pipeline
from fedrl.node.setup import NodeSetup, node_setup

__all__ = ["NodePipeline", "NodeSetup", "NodeUpdate", "Received", "RoundStart", "build_pipeline", "node_setup"]
