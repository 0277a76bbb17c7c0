"""The classifier and embedding families' GPU branches, replayed on CPU on tiny models of the architectures people
train (tests/tiny_encoders.py: transformers' own classes, so the Hub models' module names): bf16 and fp16 autocast
with activation checkpointing on (HFTM_PRECISION) where the model supports it, QLoRA in real 4-bit on
bitsandbytes' CPU backend (HFTM_QLORA_ON_CPU), two optimizer steps each, in process.

Each replay checks what a paid GPU job would meet: the head kept out of 4-bit and out of LoRA's targets and
trained whole (modules_to_save), every trainable weight in fp32, checkpointing off for classes that cannot
checkpoint, inputs cut at the encoder's positions, the adapter (head included) loaded back by the export."""

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.replay import checkpointing_on, gpu_trainer, replay_script, two_ranks
from tests.tiny_encoders import POSITIONS, build_image_encoder, build_text_encoder

pytestmark = [needs_training, pytest.mark.training,
              # PEFT reads transformers 5's renamed checkpointing flag; bitsandbytes' CPU path warns of its speed
              pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning"),
              # sentence-transformers 5.7 moved its losses; the scripts import them where every 5.x has them
              pytest.mark.filterwarnings("ignore:Importing from 'sentence_transformers:DeprecationWarning")]

# the head of each family's task model: the modules outside its base model, in the Hub models' names
TEXT_HEADS = {"bert": ["classifier"], "distilbert": ["pre_classifier", "classifier"],
              "deberta-v3": ["pooler", "classifier"], "roberta": ["classifier"], "albert": ["classifier"],
              "mpnet": ["classifier"], "bart": ["classification_head"]}
IMAGE_HEADS = {"vit": ["classifier"], "convnext": ["classifier"], "resnet": ["classifier"]}
CANNOT_CHECKPOINT = {"albert", "mpnet", "convnext", "resnet"}  # supports_gradient_checkpointing = False


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encoders")


def check_heads_train_whole(trainer, heads: list[str], peft: str) -> dict[str, Any]:
    """The heads: unquantized, no LoRA inside, every weight trainable in fp32 (adapters too); the trainable head
    weights as they are before training."""
    import bitsandbytes as bnb
    import torch
    from peft.utils import ModulesToSaveWrapper

    model = trainer.model
    inner = model.get_base_model() if peft != "full" else model
    quantized = [n for n, m in inner.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    for head in heads:
        module = inner.get_submodule(head)
        assert not any(isinstance(m, bnb.nn.Linear4bit) for m in module.modules()), f"{head} was quantized"
        if peft != "full":
            assert isinstance(module, ModulesToSaveWrapper), f"{head} is not trained whole: {type(module).__name__}"
            assert not any("lora_" in n for n, _ in module.named_parameters()), f"{head} got LoRA"
    if peft == "qlora" and any(isinstance(m, torch.nn.Linear) for m in inner.get_submodule(inner.base_model_prefix)
                               .modules()):  # a ResNet's only linear layer is its head
        assert quantized, "QLoRA quantized nothing"
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and {p.dtype for p in trainable.values()} == {torch.float32}
    in_heads = {n: p.detach().clone() for n, p in trainable.items()
                if any(f".{h}." in f".{n}" for h in heads)}
    assert {h for h in heads if any(f".{h}." in f".{n}" for n in in_heads)} == set(heads)
    return in_heads


def check_trained(trainer, before: dict[str, Any]) -> None:
    import math

    import torch

    result = trainer.train()
    assert math.isfinite(result.training_loss)
    after = dict(trainer.model.named_parameters())
    unmoved = [n for n, p in before.items() if torch.equal(after[n].detach(), p)]
    assert not unmoved, f"head weights that did not move in 2 steps: {unmoved}"


# --- text classification ----------------------------------------------------------------------------------------
# DeBERTa's QLoRA is refused before launch (test below): its LoRA runs under both precisions instead
TEXT_RUNS = [(family, precision, peft) for family in TEXT_HEADS
             for precision, peft in (("bf16", "lora" if family == "deberta-v3" else "qlora"), ("fp16", "lora"))]
TEXT_RUNS += [("distilbert", "fp16", "qlora"), ("bert", "fp16", "qlora")]  # QLoRA on a T4


@pytest.mark.parametrize(("family", "precision", "peft"), TEXT_RUNS, ids=["-".join(r) for r in TEXT_RUNS])
def test_text_classifiers_train_their_whole_head_under_gpu_precision(family: str, precision: str, peft: str,
                                                                     encoders: Path, tmp_path: Path, offline,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Items 1-3 and the DeBERTa/BART suspicion: 4-bit on everything but the head (DistilBERT's pre_classifier
    too), the head never a LoRA target (DistilBERT's suffix-matched pre_classifier), DeBERTa's pooler and BART's
    classification_head trained whole; ALBERT and MPNet without checkpointing, the rest with it."""
    model = build_text_encoder(encoders / family, family)
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="text-classification", peft=peft),
                          monkeypatch, precision)
    assert checkpointing_on(trainer) == (family not in CANNOT_CHECKPOINT)
    check_trained(trainer, check_heads_train_whole(trainer, TEXT_HEADS[family], peft))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_deberta_qlora_fails_at_the_first_step_so_it_is_refused_before_launch(precision: str, encoders: Path,
                                                                               tmp_path: Path, offline,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' DeBERTa attention masks with finfo(query dtype).min: float32 queries from the 4-bit layers,
    half-precision scores under autocast. The plan refuses it, naming LoRA."""
    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.estimate.sizing import model_size

    model = build_text_encoder(encoders / "deberta-v3", "deberta-v3")
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    request = TrainingRequest(model=str(model), dataset=str(data), hub_model_id="me/out", flavor="a10g-large",
                              method="text-classification", peft="qlora")
    with pytest.raises(TrainError, match="does not train .* Send peft='lora'"):
        plan_run(request, backend="hf", size=model_size(str(model)), catalog=fallback_catalog(), namespace="me",
                 data=DataFacts(num_rows=16))
    script = replay_script(tmp_path, model, data, method="text-classification", peft="qlora")  # what it would run
    trainer = gpu_trainer(script, monkeypatch, precision)
    with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
        trainer.train()


@pytest.mark.parametrize("family", ["albert", "mpnet"])
def test_a_full_fine_tune_of_an_encoder_that_cannot_checkpoint_trains_without(family: str, encoders: Path,
                                                                              tmp_path: Path, offline,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2: Trainer(gradient_checkpointing=True) calls the model's activation_checkpointing_enable, which raises
    "does not support activation checkpointing" for these classes."""
    model = build_text_encoder(encoders / family, family)
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="text-classification", peft="full"),
                          monkeypatch, "bf16")
    assert not checkpointing_on(trainer)
    check_trained(trainer, check_heads_train_whole(trainer, TEXT_HEADS[family], "full"))


def test_a_checkpoint_with_a_head_of_other_classes_gets_a_fresh_one(encoders: Path, tmp_path: Path, offline,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub fine-tune of another task (a 3-class sentiment model) trained on 2 classes: its head is replaced, as
    the image classifier's is and as evaluation and export load it (ignore_mismatched_sizes), not refused."""
    model = build_text_encoder(encoders / "roberta-3-classes", "roberta", head=True)
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="text-classification", peft="lora"),
                          monkeypatch, "bf16")
    assert trainer.model.config.id2label == {0: "negative", 1: "positive"}
    check_trained(trainer, check_heads_train_whole(trainer, TEXT_HEADS["roberta"], "lora"))


@pytest.mark.parametrize("family", ["distilbert", "roberta"])
def test_texts_longer_than_the_encoders_positions_are_cut_to_them(family: str, encoders: Path, tmp_path: Path,
                                                                  offline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 10: max_length 512 (the method's default) on an encoder with 64 positions (DistilBERT's 512 at tiny
    size; RoBERTa's table holds 66, counted after the padding index)."""
    model = build_text_encoder(encoders / family, family)
    rows = example_rows("text-classification", 16)
    for row in rows[::2]:
        row["text"] = " ".join([row["text"]] * 40)  # ~400 tokens
    data = write_jsonl(tmp_path / "long.jsonl", rows)
    script = replay_script(tmp_path, model, data, method="text-classification", peft="lora")
    assert script["CONFIG"]["max_length"] == 512
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    assert max(len(ids) for ids in trainer.train_dataset["input_ids"]) == POSITIONS
    check_trained(trainer, {})


@pytest.mark.parametrize("family", ["distilbert", "deberta-v3", "bart"])
def test_the_trained_head_is_in_the_adapter_that_export_merges(family: str, encoders: Path, tmp_path: Path,
                                                               offline, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head trained whole is saved in the adapter (modules_to_save) and the export's merge loads it back: the
    merged model's head is the trained one, not the base's."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from hf_train_mcp.estimate.sizing import model_size
    from hf_train_mcp.planning.export import Subject, plan_export
    from hf_train_mcp.contract.requests import ExportRequest

    model = build_text_encoder(encoders / family, family)
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="text-classification", peft="lora"),
                          monkeypatch, "bf16")
    trainer.train()
    out = tmp_path / "out"
    trainer.save_model(str(out))
    assert json.loads((out / "labels.json").read_text())["id2label"] == {"0": "negative", "1": "positive"}
    trained = {n.replace("modules_to_save.default.", ""): p.detach().clone()
               for n, p in trainer.model.get_base_model().named_parameters() if "modules_to_save.default" in n}

    subject = Subject(ref=str(out), kind="adapter", base_model=str(model), method="text-classification")
    plan = plan_export(ExportRequest(model=str(out), backend="local"), subject, backend="local",
                       size=model_size(str(model)), catalog=fallback_catalog(), namespace=None, warnings=[])
    export = tmp_path / "export.py"
    export.write_text(plan.render().text)
    runpy.run_path(str(export), run_name="hftm_export")["merged_model"](str(tmp_path / "merged"))
    merged = dict(AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged").named_parameters())
    assert {n.split(".")[0] for n in trained} == set(TEXT_HEADS[family])
    for name, weight in trained.items():
        assert torch.allclose(merged[name].float(), weight.float()), name


# --- image classification ---------------------------------------------------------------------------------------
IMAGE_RUNS = [(family, precision, peft) for family in IMAGE_HEADS
              for precision, peft in (("bf16", "qlora"), ("fp16", "lora"), ("bf16", "full"))]
IMAGE_RUNS += [("vit", "fp16", "qlora")]


@pytest.mark.parametrize(("family", "precision", "peft"), IMAGE_RUNS, ids=["-".join(r) for r in IMAGE_RUNS])
def test_image_classifiers_train_their_whole_head_under_gpu_precision(family: str, precision: str, peft: str,
                                                                      encoders: Path, tmp_path: Path, offline,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Items 1 and 2 for images: ViT's head kept out of 4-bit; ConvNeXt and ResNet (classifier.1 in a Sequential)
    without checkpointing; ResNet, whose only linear layer is its head, adapts its convolutions."""
    model = build_image_encoder(encoders / family, family)
    rows = example_rows("image-classification", 16)
    write_images(tmp_path / "data", rows)
    trainer = gpu_trainer(replay_script(tmp_path, model, tmp_path / "data" / "images",
                                        method="image-classification", peft=peft), monkeypatch, precision)
    assert checkpointing_on(trainer) == (family not in CANNOT_CHECKPOINT)
    if peft != "full":
        assert any("lora_" in n for n, p in trainer.model.named_parameters() if p.requires_grad)
    check_trained(trainer, check_heads_train_whole(trainer, IMAGE_HEADS[family], peft))


# --- the review of the families (issue 30, second round): findings 5-8 and 11 ---------------------------------------
CNN_RUNS = [("regnet-y", "fp16", "lora"), ("regnet-y", "bf16", "qlora"), ("efficientnet", "fp16", "lora"),
            ("efficientnet", "bf16", "qlora"), ("mobilenet_v2", "bf16", "lora")]


@pytest.mark.parametrize(("family", "precision", "peft"), CNN_RUNS, ids=["-".join(r) for r in CNN_RUNS])
def test_lora_on_a_cnn_adapts_its_plain_convolutions_not_its_grouped_or_depthwise_ones(
        family: str, precision: str, peft: str, encoders: Path, tmp_path: Path, offline,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 6: RegNet-Y's grouped convolutions (groups 3 and 6: rank 16 is no multiple, PEFT raises), MobileNet's
    depthwise ones and EfficientNet's EfficientNetDepthwiseConv2d (a subclass PEFT cannot rebuild) stay as they
    are; the adapters sit on the plain convolutions (groups=1), which train, beside the head trained whole."""
    import torch
    from peft.tuners.lora import LoraLayer

    fields = {"tf_padding": False} if family == "mobilenet_v2" else {}  # TF padding: the next test
    model = build_image_encoder(encoders / f"{family}-plain", family, **fields)
    rows = example_rows("image-classification", 16)
    write_images(tmp_path / "data", rows)
    trainer = gpu_trainer(replay_script(tmp_path, model, tmp_path / "data" / "images",
                                        method="image-classification", peft=peft), monkeypatch, precision)
    inner = trainer.model.get_base_model()
    adapted = [m.get_base_layer() for m in inner.modules() if isinstance(m, LoraLayer)]
    assert adapted and all(type(m) is torch.nn.Conv2d and m.groups == 1 for m in adapted)
    left = [m for n, m in inner.named_modules() if isinstance(m, torch.nn.Conv2d) and ".lora_" not in n
            and not n.endswith(".base_layer")]  # the model's own convolutions that got no adapter
    assert left and all(m.groups > 1 or type(m) is not torch.nn.Conv2d for m in left)  # the grouped ones stay
    before = check_heads_train_whole(trainer, ["classifier"], peft)
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    check_trained(trainer, before)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(after[n].detach(), p) for n, p in lora.items())


def test_lora_on_a_mobilenet_with_tf_padding_stops_before_training(encoders: Path, tmp_path: Path, offline,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """google/mobilenet_v2_1.0_224's TF-style padding reads each convolution's stride, which a LoRA layer does
    not carry (AttributeError at the first forward): the script stops at once and says what to send."""
    model = build_image_encoder(encoders / "mobilenet_v2", "mobilenet_v2")
    rows = example_rows("image-classification", 16)
    write_images(tmp_path / "data", rows)
    script = replay_script(tmp_path, model, tmp_path / "data" / "images", method="image-classification", peft="lora")
    with pytest.raises(SystemExit, match=r"LoRA cannot adapt MobileNetV2ForImageClassification: .* Send peft='full'"):
        gpu_trainer(script, monkeypatch, "fp16")


@pytest.mark.parametrize("family", ["swin", "focalnet"])
def test_qlora_trains_models_whose_patch_embeddings_return_a_tuple(family: str, encoders: Path, tmp_path: Path,
                                                                   offline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 7: prepare_model_for_kbit_training's default hook makes the input embeddings' output require grad
    (`output.requires_grad_(True)`), and Swin's and FocalNet's patch embeddings return a tuple: AttributeError at
    the first forward. Non-reentrant checkpointing needs no such hook: real 4-bit, bf16, checkpointing on."""
    model = build_image_encoder(encoders / family, family)
    rows = example_rows("image-classification", 16)
    write_images(tmp_path / "data", rows)
    trainer = gpu_trainer(replay_script(tmp_path, model, tmp_path / "data" / "images",
                                        method="image-classification", peft="qlora"), monkeypatch, "bf16")
    assert checkpointing_on(trainer)
    check_trained(trainer, check_heads_train_whole(trainer, ["classifier"], "qlora"))


REWARD_RUNS = [("roberta", "qlora"), ("roberta", "lora"), ("deberta-v3", "lora"), ("deberta-v3", "qlora"),
               ("distilbert", "lora"), ("distilbert", "qlora"), ("bert", "lora")]


@pytest.mark.parametrize(("family", "peft"), REWARD_RUNS, ids=["-".join(r) for r in REWARD_RUNS])
def test_reward_models_on_encoders_train_their_whole_head_out_of_4_bit(family: str, peft: str, encoders: Path,
                                                                       tmp_path: Path, offline,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 8: method='reward' on encoders: the head TRL's AutoModelForSequenceClassification adds (RoBERTa's
    classifier.dense/out_proj, DeBERTa's pooler and classifier, DistilBERT's pre_classifier and classifier) kept
    out of 4-bit (bitsandbytes asserted, or 'compress_statistics' failed) and out of LoRA's targets (DistilBERT's
    pre_classifier became a lora.Linear that modules_to_save refused), trained whole, under bf16 with
    checkpointing. BERT's and DistilBERT's tokenizers name no eos, which TRL appends to each answer (a TypeError
    in str.endswith): their [SEP] ends the answers."""
    model = build_text_encoder(encoders / family, family)
    data = write_jsonl(tmp_path / "preferences.jsonl", example_rows("reward", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="reward", peft=peft), monkeypatch, "bf16")
    assert checkpointing_on(trainer)
    heads = check_heads_train_whole(trainer, TEXT_HEADS[family], peft)
    # the score's own bias adds alike to the chosen and the rejected answer: the pairwise loss gives it no gradient
    check_trained(trainer, {n: p for n, p in heads.items() if not n.endswith(".bias")})


@pytest.mark.parametrize("problem", ["multi_label_classification", "regression"])
def test_a_checkpoint_of_another_problem_type_gets_a_single_label_head(problem: str, encoders: Path, tmp_path: Path,
                                                                       offline, monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    """Finding 11: a Hub fine-tune whose config sets problem_type (SamLowe/roberta-base-go_emotions: multi-label)
    keeps it through from_pretrained, and its loss wants float targets of the head's shape: a ValueError (or a
    size mismatch, for regression) at step 1. The job's new head trains on class ids, single-label."""
    model = build_text_encoder(encoders / f"roberta-{problem}", "roberta", head=True)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "problem_type": problem}))
    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16))
    trainer = gpu_trainer(replay_script(tmp_path, model, data, method="text-classification", peft="lora"),
                          monkeypatch, "bf16")
    assert trainer.model.config.problem_type == "single_label_classification"
    check_trained(trainer, check_heads_train_whole(trainer, TEXT_HEADS["roberta"], "lora"))


def test_a_full_fine_tune_with_a_weight_no_step_uses_trains_on_two_gloo_ranks(encoders: Path, tmp_path: Path) -> None:
    """Finding 5 (b): DINOv2's mask_token is trainable in a full fine-tune and unused by classification. Under
    activation checkpointing transformers tells DDP not to look for unused parameters, and the second step fails
    ("Expected to have finished reduction in the prior iteration"). Two gloo ranks, bf16 autocast, checkpointing
    on, as a multi-GPU flavor runs it."""
    model = build_image_encoder(encoders / "dinov2", "dinov2")
    rows = example_rows("image-classification", 16)
    write_images(tmp_path / "data", rows)
    proc = two_ranks(tmp_path, model, tmp_path / "data" / "images", method="image-classification", peft="full")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "HFTM_DONE" in proc.stdout and (tmp_path / "output" / "model.safetensors").exists()


# --- embedding models -------------------------------------------------------------------------------------------
EMBEDDING_RUNS = [("mpnet", "bf16", "lora"), ("mpnet", "fp16", "lora"), ("mpnet", "bf16", "full"),
                  ("bert", "bf16", "lora"), ("bert", "fp16", "lora")]


@pytest.mark.parametrize(("family", "precision", "peft"), EMBEDDING_RUNS, ids=["-".join(r) for r in EMBEDDING_RUNS])
def test_embedding_models_train_under_gpu_precision(family: str, precision: str, peft: str, encoders: Path,
                                                    tmp_path: Path, offline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2 for embeddings (sentence-transformers/all-mpnet-base-v2's MPNet cannot checkpoint; BERT does), and
    item 10's shared limit: max_length 256 (the method's default) cut to the 64 positions of a table of 66."""
    import math

    import torch

    model = build_text_encoder(encoders / f"{family}-base", family)
    data = write_jsonl(tmp_path / "triplets.jsonl", example_rows("embedding", 16))
    script = replay_script(tmp_path, model, data, method="embedding", peft=peft)
    trainer = gpu_trainer(script, monkeypatch, precision)
    inner = script["transformer_module"](trainer.model).model
    base = inner.get_base_model() if peft != "full" else inner
    assert base.is_gradient_checkpointing == (family not in CANNOT_CHECKPOINT)
    assert trainer.model.max_seq_length == POSITIONS == script["CONFIG"]["max_length"]  # 256 cut: fit_positions
    trainable = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert {p.dtype for p in trainable.values()} == {torch.float32}
    moved = {n: p.detach().clone() for n, p in trainable.items()  # the pooler: unused by mean pooling
             if ("lora_B" in n or peft == "full") and ".pooler." not in n}
    assert moved and math.isfinite(trainer.train().training_loss)
    after = dict(trainer.model.named_parameters())
    assert [n for n, p in moved.items() if torch.equal(after[n].detach(), p)] == []


def test_the_card_says_which_rows_are_an_anchors_negatives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9: the card states what each anchor is ranked against: every rank's batch, not the accumulated one."""
    from sentence_transformers import losses

    data = write_jsonl(tmp_path / "triplets.jsonl", example_rows("embedding", 16))
    settings = replay_script(tmp_path, tmp_path / "model", data, method="embedding", peft="lora")[
        "embedding_card_settings"]
    ranking = losses.MultipleNegativesRankingLoss.__new__(losses.MultipleNegativesRankingLoss)
    assert settings("pairs", ranking, 16) == {
        "embedding loss": "MultipleNegativesRankingLoss",
        "embedding in-batch negatives": "the other 15 rows' positives (one device); gradient accumulation adds none"}
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert settings("triplets", ranking, 16)["embedding in-batch negatives"] == (
        "the other 127 rows' positives and every row's negative (16 per device x 8 devices, gathered across "
        "devices); gradient accumulation adds none")
    scored = settings("scored", losses.CoSENTLoss.__new__(losses.CoSENTLoss), 16)
    assert scored == {"embedding loss": "CoSENTLoss"}


RANK = '''
import json, runpy, sys
import torch.distributed as dist

dist.init_process_group("gloo")
script = runpy.run_path(sys.argv[1], run_name="hftm_rank")
model = script["sentence_model"](script["CONFIG"]["model"])
loss = script["sentence_loss"]("triplets", model)
candidates, similarity = [], loss.similarity_fct
loss.similarity_fct = lambda a, b: (candidates.append(len(b)), similarity(a, b))[1]
rank = dist.get_rank()
texts = [[f"rank {rank} text {i} {column}" for i in range(2)] for column in ("anchor", "positive", "negative")]
value = loss([model.tokenize(t) for t in texts], None)
value.backward()
with open(f"rank-{rank}.json", "w") as f:
    json.dump({"gather": loss.gather_across_devices, "candidates": candidates, "loss": value.item(),
               "grads": sum(p.grad is not None for p in model.parameters())}, f)
dist.destroy_process_group()
'''


def test_two_ranks_rank_each_anchor_against_both_ranks_rows(encoders: Path, tmp_path: Path, offline) -> None:
    """Item 9: MultipleNegativesRankingLoss(gather_across_devices=True) under WORLD_SIZE=2, on gloo: each rank's
    2 anchors are ranked against both ranks' 2 positives and 2 negatives (8 candidates, not its own 4)."""
    import os
    import subprocess

    from tests.helpers import free_port, torchrun_command

    model = build_text_encoder(encoders / "bert-base", "bert")
    data = write_jsonl(tmp_path / "triplets.jsonl", example_rows("embedding", 16))
    replay_script(tmp_path, model, data, method="embedding", peft="lora")  # writes train.py
    (tmp_path / "rank.py").write_text(RANK)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(torchrun_command("--nproc_per_node", "2", "--master_port", str(free_port()),
                                           script="rank.py", args=("train.py",)), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["gather"] for r in ranks] == [True, True] and [r["candidates"] for r in ranks] == [[8], [8]]
    assert all(r["grads"] > 0 for r in ranks)
