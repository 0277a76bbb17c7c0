"""Jobs once planned: launch, status, logs, cancel, the ledger, telemetry, the ranks of a run across nodes."""
