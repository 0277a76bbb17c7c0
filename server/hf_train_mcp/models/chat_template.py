"""Does a model's tokenizer carry a chat template? Conversational data cannot be rendered without one.

Read from the files alone (tokenizer_config.json, chat_template.jinja/json), locally or on the Hub, so that
submitting never imports transformers.
"""

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

# ChatML, what most instruct models use; offered for base models that ship no template.
# Assistant turns end with the model's own EOS too: a base model does not know <|im_end|> as a stop token.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " }}{% if message['role'] == 'assistant' and eos_token != '<|im_end|>' %}{{ eos_token }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# ChatML for rows with images: a vision-language model reads its chat template from its processor, and each image
# part of a turn must become the text the processor expands into the picture's tokens, which is the processor's own
# (the job puts it where IMAGE_SLOT is: templates/_base.py.j2 vision_processor). CHATML itself concatenates the
# content, a list of parts in such rows (a TypeError), and was only set on the tokenizer.
IMAGE_SLOT = "<|hftm_image|>"
VISION_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "{{ '" + IMAGE_SLOT + "' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' }}{% if message['role'] == 'assistant' and eos_token is defined and eos_token != '<|im_end|>' %}"
    "{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
# ShareGPT's speaker names -> chat roles: validation previews with it and the scripts convert with it (rendered in)
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant",
                  "bot": "assistant", "model": "assistant", "tool": "tool", "function": "tool"}
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def _config_has_template(text: str) -> bool:
    try:
        return bool(json.loads(text).get("chat_template"))
    except (ValueError, AttributeError):
        return False


def has_chat_template(model: str, token: str | None, *, local: bool) -> bool | None:
    """True/False from the model's files; None when they cannot be read (offline, gated, no tokenizer files)."""
    if local:
        folder = Path(model).expanduser()
        if any((folder / name).is_file() for name in TEMPLATE_FILES):
            return True
        config = folder / "tokenizer_config.json"
        return _config_has_template(config.read_text()) if config.is_file() else None
    try:
        from huggingface_hub import hf_hub_download

        from hf_train_mcp.hub import bounded, hub_api, hub_endpoint

        info = bounded(f"reading {model}", lambda: hub_api(token).model_info(model), token)
        files = {s.rfilename for s in info.siblings or []}
        if files & set(TEMPLATE_FILES):
            return True
        if "tokenizer_config.json" not in files:
            return None
        path = bounded(f"reading {model}/tokenizer_config.json", lambda: hf_hub_download(
            model, "tokenizer_config.json", token=token or False, endpoint=hub_endpoint()), token)
        return _config_has_template(Path(path).read_text())
    except Exception as exc:  # the job will tell; we only lose the early warning
        log.info("could not read the tokenizer files of %s: %s", model, exc)
        return None
