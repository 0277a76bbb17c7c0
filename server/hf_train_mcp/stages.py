"""A job's stages, as HF Jobs names them (every backend reports these), declared once."""

from typing import Literal, get_args

Stage = Literal["SCHEDULING", "RUNNING", "COMPLETED", "CANCELED", "ERROR", "DELETED"]
STAGES: tuple[str, ...] = get_args(Stage)
TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})  # the job runs no more
SETTLED_STAGES = TERMINAL_STAGES - {"DELETED"}  # an outcome: DELETED can still follow one on the Hub
