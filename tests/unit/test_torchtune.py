"""bridge/torchtune.py: Trainer v2.3's torchtune decisions (torchtune.go, torch.go), case
by case as its own tests state them, and the errors its webhook gives."""

from __future__ import annotations

import pytest

from bridge import torchtune

RUNTIME = "torchtune-llama3.2-1b"
LORA = ["model.lora_attn_modules=['q_proj']"]
QLORA = ["model.quantize_base=True"]
RUNTIME_COMMAND = ["tune", "run", "--rdzv_endpoint=localhost:29500", "full_finetune_distributed",
                   "--config", "llama3_2/1B_full", "dataset=torchtune.datasets.instruct_dataset",
                   "output_dir=/workspace/output",
                   "tokenizer.path=/workspace/model/original/tokenizer.model",
                   "checkpointer.checkpoint_dir=/workspace/model"]


@pytest.mark.parametrize(("name", "model"), [
    ("torchtune-llama3.2-1b", "llama3_2/1B"), ("torchtune-qwen2.5-1.5b", "qwen2_5/1.5B"),
    ("torchtune-llama3.3-70b", "llama3_3/70B"), ("torch-distributed", ""),
    ("torchtune-llama3.2", ""), ("a-b-c-d", "")])
def test_the_model_is_read_from_the_runtime_name(name: str, model: str) -> None:
    assert torchtune.model_of(name) == model


@pytest.mark.parametrize(("nodes", "procs", "gpus", "args", "recipe", "suffix"), [
    (1, 1, 0, [], "full_finetune_single_device", "_full_single_device"),
    (1, None, 1, LORA, "lora_finetune_single_device", "_lora_single_device"),
    (1, None, 1, QLORA, "lora_finetune_single_device", "_qlora_single_device"),
    (1, None, 4, [], "full_finetune_distributed", "_full"),
    (1, None, 4, LORA, "lora_finetune_distributed", "_lora"),
    (1, None, 4, QLORA, "lora_finetune_distributed", "_qlora"),
    (2, None, 4, [], "full_finetune_distributed", "_full_multinode"),
    (1, None, 1, [], "full_finetune_single_device", "_full_single_device"),
    (1, 2, 0, [], "full_finetune_distributed", "_full"),
    # DoRA turns QLoRA off: the LoRA recipe stays.
    (1, None, 4, [*LORA, *QLORA, "model.use_dora=true"], "lora_finetune_distributed", "_lora"),
])
def test_the_recipe_and_config_are_trainers(nodes: int, procs: int | None, gpus: int,
                                            args: list[str], recipe: str, suffix: str) -> None:
    chosen = torchtune.recipe_of(RUNTIME, nodes, procs, gpus, args)
    assert (chosen.recipe, chosen.config) == (recipe, "llama3_2/1B" + suffix)


def test_the_command_keeps_the_runtimes_immutable_configs_and_the_rendezvous() -> None:
    cmd = torchtune.command(RUNTIME, 1, None, 2, ["dtype=bf16"], RUNTIME_COMMAND,
                            rendezvous="j-node-0-0.j:29500")
    assert cmd == ("tune", "run", "--rdzv_endpoint=j-node-0-0.j:29500",
                   "full_finetune_distributed", "--config", "llama3_2/1B_full",
                   "output_dir=/workspace/output",
                   "tokenizer.path=/workspace/model/original/tokenizer.model",
                   "checkpointer.checkpoint_dir=/workspace/model")
    # One process on one GPU: no rendezvous, a single-device recipe.
    single = torchtune.command(RUNTIME, 1, None, 1, [], RUNTIME_COMMAND, rendezvous="h:1")
    assert single[:5] == ("tune", "run", "full_finetune_single_device", "--config",
                          "llama3_2/1B_full_single_device")
    assert not torchtune.needs_rendezvous(1, None, 1)
    assert torchtune.needs_rendezvous(1, 2, 0) and torchtune.needs_rendezvous(2, None, 0)


def test_what_trainers_webhook_refuses_is_refused_naming_the_field() -> None:
    assert torchtune.check(RUNTIME, 1, None, 2, ["dtype=bf16"]) == []
    fields = [f for f, _ in torchtune.check("torchtune-gpt-9b", 1, None, 2, [])]
    assert fields == ["spec.runtimeRef.name"]
    fields = [f for f, _ in torchtune.check(RUNTIME, 2, None, 2, [])]
    assert fields == ["spec.trainer.numNodes"]
    assert torchtune.check("torchtune-llama3.3-70b", 2, None, 8, []) == []
    fields = [f for f, _ in torchtune.check("torchtune-llama3.3-70b", 2, None, 8, LORA)]
    assert fields == ["spec.trainer.numNodes"]
    fields = [f for f, _ in torchtune.check("torchtune-qwen2.5-1.5b", 1, None, 1, QLORA)]
    assert fields == ["spec.runtimeRef.name"]
    fields = [f for f, _ in torchtune.check(RUNTIME, 1, None, 4, QLORA)]
    assert fields == ["spec.trainer.numProcPerNode", "spec.trainer.resourcesPerNode"]
    errors = torchtune.check(RUNTIME, 1, None, 2, ["epochs=1", "output_dir=/tmp/x"])
    assert [f for f, _ in errors] == ["spec.trainer.args[1]"]
    assert "output_dir" in errors[0][1]


def test_only_tune_run_is_a_torchtune_job() -> None:
    assert torchtune.is_torchtune(["tune", "run"])
    assert not torchtune.is_torchtune(["tune", "run", "x"])
    assert not torchtune.is_torchtune(None)


def test_more_of_trainers_cases() -> None:
    # quantize_base false is no QLoRA; DoRA alone is not LoRA (no attention modules)
    assert torchtune.recipe_of(RUNTIME, 1, None, 1, ["model.quantize_base=False"]).recipe == (
        "full_finetune_single_device")
    assert torchtune.recipe_of(RUNTIME, 1, None, 1, ["model.use_dora=true"]).recipe == (
        "full_finetune_single_device")
    # the 3B model with QLoRA on several devices: the webhook's two errors
    fields = [f for f, _ in torchtune.check("torchtune-llama3.2-3b", 1, None, 2, QLORA)]
    assert fields == ["spec.trainer.numProcPerNode", "spec.trainer.resourcesPerNode"]
    # tokenizer.merges_file is one of the runtime's immutable items
    cmd = torchtune.command("torchtune-qwen2.5-1.5b", 1, 1, 0, [],
                            ["tune", "run", "tokenizer.merges_file=/w/merges.txt", "x=1"])
    assert cmd[-1] == "tokenizer.merges_file=/w/merges.txt" and "x=1" not in cmd
    assert torchtune.needs_rendezvous(1, None, 4) and not torchtune.needs_rendezvous(1, 1, 4)
