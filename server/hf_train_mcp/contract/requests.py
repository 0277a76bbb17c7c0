"""What callers send to each tool, validated before anything is rendered or launched. One model per tool: its
fields are the MCP tool's parameters and the CLI command's options (declared once, in its family's module:
training_requests, followup_requests, sweep_requests, job_requests, script_requests; request_fields holds what
they share)."""

from hf_train_mcp.contract.followup_requests import EvaluateRequest, ExportRequest, FollowupShape
from hf_train_mcp.contract.job_requests import (CancelRequest, HardwareRequest, JobId, JobIdText, ListRequest,
                                                LogsRequest, StatusRequest)
from hf_train_mcp.contract.request_fields import (Request, lift_options, nested_options, options_description,
                                                  with_method_options)
from hf_train_mcp.contract.script_requests import ScriptRequest
from hf_train_mcp.contract.sweep_requests import (NOT_GRIDDED, PRUNE_INCOMPARABLE, SWEEP_OWNED, SWEEP_RUNS_MAX,
                                                  CompareRequest, SweepRequest)
from hf_train_mcp.contract.training_requests import (ALL_LINEAR, EstimateRequest, RunShape, TrainingRequest,
                                                     ValidateRequest, lora_target_names)

__all__ = [
    "ALL_LINEAR", "NOT_GRIDDED", "PRUNE_INCOMPARABLE", "SWEEP_OWNED", "SWEEP_RUNS_MAX", "CancelRequest",
    "CompareRequest", "EstimateRequest", "EvaluateRequest", "ExportRequest", "FollowupShape", "HardwareRequest",
    "JobId", "JobIdText", "ListRequest", "LogsRequest", "Request", "RunShape", "ScriptRequest", "StatusRequest",
    "SweepRequest", "TrainingRequest", "ValidateRequest", "lift_options", "lora_target_names", "nested_options",
    "options_description", "with_method_options",
]
