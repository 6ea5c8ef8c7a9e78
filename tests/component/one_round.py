"""One evaluated round into a run folder, without Flower: what end_round and finish write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedrl.server.federation import Federation


def one_round(fed: Federation, folder_path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Record round 1 of ``fed`` (a run configured with ``output-dir`` and ``run-name``) and finish
    the run; return its metrics row, summary (checked equal to summary.json) and config.json."""
    from fedrl.server.rundir import end_round, finish, resolve_run_folder

    folder = resolve_run_folder(fed)
    fed.round = 1
    end_round(fed, folder, 0.0, 0.0, {})
    summary = finish(fed, folder)
    row = json.loads((folder_path / "metrics.jsonl").read_text().splitlines()[-1])
    config = json.loads((folder_path / "config.json").read_text())
    assert json.loads((folder_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    return row, summary, config
