"""Edge deployment benchmark: the three measurements of running fedrl clients on devices, in one invocation.

    sudo python simulations/edge_benchmark.py [--quick]

1. ``client_footprint.py``: per-message ClientApp start-up time and peak RSS, against a flwr+torch floor;
2. ``latency_benchmark.py``: the round-latency floor on localhost with 2 and 8 SuperNodes, fedrl's
   loop against Flower's ``send_and_receive`` (and with the SuperExec poll interval lowered);
3. ``network_benchmark.py``: wall time per round over 100 ms RTT / 1% loss / 2 Mbit/s links, with
   and without uplink compression (needs root; skipped with the reason otherwise).

Each part runs as its own process, one after the other, and prints its own progress and table;
``--quick`` runs each with fewer repetitions. Exits non-zero if any part failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PARTS = {
    "client footprint": (["client_footprint.py", "--reps", "5"], ["client_footprint.py", "--reps", "2"]),
    "round-latency floor": (["latency_benchmark.py"], ["latency_benchmark.py", "--rounds", "3", "--reps", "1"]),
    "shaped links": (["network_benchmark.py"], ["network_benchmark.py", "--reps", "1", "--rounds", "3"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions in every part")
    args = ap.parse_args()
    failed = []
    t0 = time.time()
    for name, (full, quick) in PARTS.items():
        print(f"\n# {name}\n", flush=True)
        rc = subprocess.run([sys.executable, str(HERE / (quick if args.quick else full)[0]),
                             *(quick if args.quick else full)[1:]], check=False).returncode
        if rc != 0:
            failed.append(f"{name} (exit {rc})")
    print(f"\nedge benchmark: {len(PARTS) - len(failed)}/{len(PARTS)} parts done in {time.time() - t0:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
