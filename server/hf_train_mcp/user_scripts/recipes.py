"""The libraries run_script recognises, as data: how to tell their scripts (URL pattern, image), how each pushes
its output, which arguments cap a smoke test, and what its docs add. From the Hub's "Train models on Jobs" page
(shared/seeds/003); a new library is one entry here, no code.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str
    url: str | None = None  # a regular expression a script URL matches
    image: str | None = None  # a regular expression the Docker image matches
    push: tuple[str, ...] = ()  # arguments (or config keys) that push the result to the Hub
    smoke_caps: tuple[str, ...] = ()  # arguments that cap a first run to a few minutes
    launches_itself: bool = False  # starts one process per GPU on its own (no accelerate/torchrun needed)
    config_keys: tuple[str, ...] = ()  # keys a config file of the mounted folder should set to push
    headerless_with: tuple[str, ...] = ()  # `--with` dependencies for its scripts that carry no `# /// script`
    advice: str = ""


RECIPES: tuple[Recipe, ...] = (
    Recipe("transformers", url=r"/huggingface/transformers/.*/examples/", push=("--push_to_hub",),
           smoke_caps=("--max_train_samples", "--max_eval_samples", "--max_steps"),
           advice="Transformers example: pass --output_dir (the repo takes its name) and --push_to_hub; smoke-test "
                  "with --max_train_samples 2000 --max_eval_samples 500 --num_train_epochs 1 first"),
    Recipe("trl", url=r"/huggingface/trl/.*/trl/scripts/", image=r"^huggingface/trl(:|$)", push=("--push_to_hub",),
           smoke_caps=("--max_steps",),
           advice="TRL script: pass --output_dir and --push_to_hub; smoke-test with --max_steps 100"),
    Recipe("unsloth", url=r"/datasets/unsloth/jobs/", push=("--output-repo",), smoke_caps=("--max-steps",),
           advice="Unsloth Jobs script: pass --output-repo <you>/<name>; smoke-test with --max-steps 50"),
    Recipe("axolotl", image=r"^axolotlai/axolotl(:|$)", push=("hub_model_id",), smoke_caps=("max_steps",),
           launches_itself=True, config_keys=("hub_model_id", "hub_strategy"),
           advice="Axolotl: mount the config folder (folder=) and run `axolotl train <config>.yml`; set "
                  "hub_model_id and hub_strategy in the YAML, and max_steps for a first run"),
    Recipe("diffusers", url=r"/huggingface/diffusers/.*/examples/", push=("--push_to_hub",),
           smoke_caps=("--max_train_steps",),
           headerless_with=("diffusers", "transformers", "accelerate", "peft", "torch", "torchvision", "datasets",
                            "ftfy", "sentencepiece", "bitsandbytes"),
           advice="Diffusers DreamBooth: pass --push_to_hub --hub_model_id <you>/<name>; smoke-test with "
                  "--max_train_steps 20"),
)

# Markers that a run leaves its result somewhere that outlives the job's disk (in the source, args or config)
PUSH_MARKERS = ("push_to_hub", "--output-repo", "hub_model_id", "upload_folder", "upload_file", "sync_bucket",
                "create_commit")
# A branch name in a script URL: a re-run may fetch other code
MOVING_URL = re.compile(r"/refs/heads/|/(?:resolve|raw|blob)/(?:main|master)/|githubusercontent\.com/[^/]+/[^/]+/"
                        r"(?:main|master)/")
LAUNCHERS = ("accelerate", "torchrun", "deepspeed", "axolotl")  # commands that start one process per GPU


def recognise(*, url: str | None, image: str | None) -> Recipe | None:
    """The library a script URL or an image belongs to, if it is one of RECIPES."""
    for recipe in RECIPES:
        if url and recipe.url and re.search(recipe.url, url):
            return recipe
        if image and recipe.image and re.search(recipe.image, image):
            return recipe
    return None
