"""Client footprint: what one fresh ClientApp process costs, as Flower's Deployment Engine starts one per message.

    python simulations/client_footprint.py [--reps 5]

Each repetition starts a fresh Python process that (1) imports the ClientApp (``client_app``),
then (2) runs one local round the way a train message does (CartPole, the default 1,024 env
steps of PPO on one thread), and reports its import time, round time and peak RSS
(``ru_maxrss``). Alongside, as the reference floor, a process that imports only ``flwr.app`` and
torch. Runs are interleaved (A, B, A, B) because this machine's speed drifts; the table gives
medians and the ratio to the floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, resource, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "floor":
    import flwr.app, torch  # noqa: F401
    t1 = time.perf_counter(); t2 = t1
else:
    import client_app  # noqa: F401
    t1 = time.perf_counter()
    import torch
    torch.set_num_threads(1)
    from fedrl.config import from_run_config
    from fedrl.envs.make import make_vector_env
    from fedrl.experiment import initial_weights, policy_spec, variants_of
    from fedrl.rl.train import LocalPlan, NodeState, train_locally
    cfg = from_run_config({})
    v = variants_of(cfg)
    spec = policy_spec(cfg, v[0])
    envs = make_vector_env(cfg.env.id, [v[0]] * cfg.algo.num_envs, {})
    train_locally(spec, initial_weights(spec, 0), envs, cfg, LocalPlan(0, 1, 30, 0), NodeState.empty())
    envs.close()
    t2 = time.perf_counter()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"opacus", "scipy", "matplotlib", "ray", "pandas"})
print(json.dumps({"import_s": t1 - t0, "round_s": t2 - t1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "heavy": heavy}))
'''


def _child(kind: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    res: dict[str, list[dict]] = {"floor": [], "client": []}
    for rep in range(args.reps):
        for kind, runs in res.items():  # interleaved
            r = _child(kind)
            runs.append(r)
            print(f"[rep {rep}] {kind:<7} import {r['import_s']:.2f} s  round {r['round_s']:.2f} s  "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB  heavy modules {r['heavy']}", flush=True)

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in res[kind])

    print(f"\nfresh process per message, medians of {args.reps}")
    print(f"{'process':<34}{'import s':>9}{'round s':>9}{'peak RSS MB':>13}")
    print(f"{'floor: import flwr.app + torch':<34}{med('floor', 'import_s'):>9.2f}{'-':>9}"
          f"{med('floor', 'peak_rss_mb'):>13.0f}")
    print(f"{'ClientApp + one 1,024-step round':<34}{med('client', 'import_s'):>9.2f}{med('client', 'round_s'):>9.2f}"
          f"{med('client', 'peak_rss_mb'):>13.0f}")
    print(f"ratios to the floor: import x{med('client', 'import_s') / med('floor', 'import_s'):.2f}, "
          f"peak RSS x{med('client', 'peak_rss_mb') / med('floor', 'peak_rss_mb'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
