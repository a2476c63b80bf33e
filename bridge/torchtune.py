"""Kubeflow Trainer's BuiltinTrainer for torchtune, as the bridge runs it (pure).

A TrainJob whose ``spec.trainer.command`` is exactly ``["tune", "run"]`` (what the
Kubeflow SDK's ``BuiltinTrainer(config=TorchTuneConfig(...))`` sends) is a torchtune
post-training job. Trainer's torch plugin (v2.3, ``torchtune.go``, ``torch.go``)
completes its command from the runtime's name, the job's size and its ``args``; this
module makes the same decisions:

* the model is read from the runtime's name, ``torchtune-<model>-<size>``
  (``torchtune-llama3.2-1b`` is ``llama3_2/1B``);
* the recipe and config: one process on one node (``numProcPerNode: 1``, or one GPU
  per node) is a single-device recipe, else a distributed one; LoRA when the args set
  ``model.lora_attn_modules``, QLoRA when they set ``model.quantize_base=true``
  (without ``model.use_dora=true``); ``_full_multinode`` for more than one node;
* the command becomes ``tune run [--rdzv_endpoint=…] <recipe> --config <config>``
  followed by the runtime's node command items that set a configuration the job may
  not (:data:`IMMUTABLE_CONFIGS`: where the initializers put the model and output);
  the rendezvous endpoint is the back end's (the first node, port 29500) and is only
  there for more than one process (:func:`needs_rendezvous`);
* :func:`check` refuses what Trainer's validating webhook refuses (an unsupported
  model, several nodes for a model other than the 70B one, LoRA on several nodes,
  QLoRA where the model or size does not allow it, an immutable configuration in the
  args), each error naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ENTRYPOINT", "IMMUTABLE_CONFIGS", "SUPPORTED_MODELS", "Recipe", "check",
           "command", "is_torchtune", "model_of", "needs_rendezvous", "recipe_of"]

#: ``spec.trainer.command`` of a torchtune job (Trainer's ``TorchTuneEntrypoint``).
ENTRYPOINT = ("tune", "run")
#: The models Trainer v2.3 supports (``TorchTuneSupportedPretrainedModels``).
LLAMA3_2_1B, LLAMA3_2_3B, LLAMA3_3_70B, QWEN2_5_1_5B = (
    "llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")
SUPPORTED_MODELS = frozenset({LLAMA3_2_1B, LLAMA3_2_3B, LLAMA3_3_70B, QWEN2_5_1_5B})
#: Configuration items the runtime sets and a job may not (``TorchTuneImmutableConfigs``).
IMMUTABLE_CONFIGS = frozenset({"output_dir", "tokenizer.path", "checkpointer.checkpoint_dir",
                               "tokenizer.merges_file"})
RDZV_ARG = "--rdzv_endpoint"
CONFIG_ARG = "--config"
LORA_ATTN_MODULES = "model.lora_attn_modules"
QUANTIZE_BASE = "model.quantize_base"
USE_DORA = "model.use_dora"


def is_torchtune(job_command: Sequence[str] | None) -> bool:
    """Whether ``spec.trainer.command`` makes the job a torchtune job."""
    return tuple(job_command or ()) == ENTRYPOINT


def model_of(runtime: str) -> str:
    """The model a runtime named ``torchtune-<model>-<size>`` fine-tunes (``""`` for a
    name of another form): ``torchtune-qwen2.5-1.5b`` is ``qwen2_5/1.5B``."""
    fields = runtime.split("-")
    if len(fields) != 3:
        return ""
    return f"{fields[1].replace('.', '_')}/{fields[2].upper()}"


def _bool_arg(args: Sequence[str], item: str) -> bool:
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and item in name and value.strip().lower() == "true":
            return True
    return False


def _lora(args: Sequence[str]) -> bool:
    return any(LORA_ATTN_MODULES in a for a in args)


def _qlora(args: Sequence[str]) -> bool:
    return not _bool_arg(args, USE_DORA) and _bool_arg(args, QUANTIZE_BASE)


@dataclass(frozen=True)
class Recipe:
    """A torchtune recipe and the config file it runs with."""

    recipe: str
    config: str


def recipe_of(runtime: str, num_nodes: int, procs: int | None, gpus_per_node: int,
              args: Sequence[str]) -> Recipe:
    """The recipe and config (module docstring); ``procs`` ``None`` is ``auto``."""
    recipe, suffix = "full_finetune_distributed", "_full"
    if num_nodes == 1 and (procs == 1 or gpus_per_node == 1):
        if _qlora(args):
            recipe, suffix = "lora_finetune_single_device", "_qlora_single_device"
        elif _lora(args):
            recipe, suffix = "lora_finetune_single_device", "_lora_single_device"
        else:
            recipe, suffix = "full_finetune_single_device", "_full_single_device"
    elif num_nodes == 1 and _qlora(args):
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif num_nodes == 1 and _lora(args):
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif num_nodes > 1:
        suffix = "_full_multinode"
    return Recipe(recipe, model_of(runtime) + suffix)


def needs_rendezvous(num_nodes: int, procs: int | None, gpus_per_node: int) -> bool:
    """Whether the command gets ``--rdzv_endpoint``: more than one node, more than one
    process per node, or ``auto`` processes on more than one GPU."""
    return num_nodes > 1 or (procs or 0) > 1 or (procs is None and gpus_per_node > 1)


def check(runtime: str, num_nodes: int, procs: int | None, gpus_per_node: int,
          args: Sequence[str]) -> list[tuple[str, str]]:
    """What Trainer's webhook refuses in a torchtune job, as ``(field, message)``."""
    errors: list[tuple[str, str]] = []
    model = model_of(runtime)
    if model not in SUPPORTED_MODELS:
        errors.append(("spec.runtimeRef.name",
                       f"{runtime!r}: a torchtune runtime must name a supported pretrained "
                       f"model (torchtune-<model>-<size>: {', '.join(sorted(SUPPORTED_MODELS))}"
                       f"), not {model or 'none'!r}"))
    if num_nodes > 1 and model != LLAMA3_3_70B:
        errors.append(("spec.trainer.numNodes", f"{num_nodes}: must be 1 for the "
                       f"{model or runtime} model (only {LLAMA3_3_70B} fine-tunes on "
                       f"several nodes)"))
    config = recipe_of(runtime, num_nodes, procs, gpus_per_node, args).config
    if "_qlora" in config:
        if model == QWEN2_5_1_5B:
            errors.append(("spec.runtimeRef.name", f"{runtime!r}: QLoRA is not supported "
                           f"for the {model} model"))
        if "_qlora_single_device" not in config and model in (LLAMA3_2_1B, LLAMA3_2_3B):
            errors.append(("spec.trainer.numProcPerNode",
                           f"{'auto' if procs is None else procs}: must be auto or 1 for the "
                           f"{model} model with QLoRA"))
            errors.append(("spec.trainer.resourcesPerNode", f"must ask for exactly 1 GPU for "
                           f"the {model} model with QLoRA"))
    if num_nodes > 1 and (_lora(args) or _qlora(args)):
        errors.append(("spec.trainer.numNodes", f"{num_nodes}: LoRA fine-tuning is not "
                       f"supported for multi-node training in torchtune"))
    for i, arg in enumerate(args):
        key = arg.split("=", 1)[0]
        if key in IMMUTABLE_CONFIGS:
            errors.append((f"spec.trainer.args[{i}]", f"{arg!r}: {key!r} is set by the "
                           f"runtime (where its initializers put the model and the output)"))
    return errors


def command(runtime: str, num_nodes: int, procs: int | None, gpus_per_node: int,
            args: Sequence[str], runtime_command: Sequence[str],
            rendezvous: str | None = None) -> tuple[str, ...]:
    """The complete command (module docstring). ``runtime_command`` is the runtime's
    trainer container's command, whose immutable configuration items are kept;
    ``rendezvous`` (``host:port``) is written when :func:`needs_rendezvous`."""
    out = list(ENTRYPOINT)
    if rendezvous is not None and needs_rendezvous(num_nodes, procs, gpus_per_node):
        out.append(f"{RDZV_ARG}={rendezvous}")
    chosen = recipe_of(runtime, num_nodes, procs, gpus_per_node, args)
    out += [chosen.recipe, CONFIG_ARG, chosen.config]
    out += [c for c in runtime_command if c.split("=", 1)[0] in IMMUTABLE_CONFIGS]
    return tuple(out)
