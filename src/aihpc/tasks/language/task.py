"""The language task: decoder-only transformers grown by exact function-preserving operators.

Architectures are :class:`~aihpc.tasks.language.spec.LMSpec` (a pre-norm decoder:
RMSNorm, causal attention through ``scaled_dot_product_attention`` with rotary
positions, a GELU MLP) grown by :func:`aihpc.tasks.language.morphism.random_lm_plan`
(add a block, widen an MLP, add heads, widen the residual stream), each step
computing exactly its parent's function, so a child trains on from its
parent's weights.  Data are :mod:`aihpc.tasks.language.data`'s: ``synthetic`` (the
topic x state hidden Markov language, whose floor is known), ``text`` (a
folder of UTF-8 files as bytes) or ``tokens`` (a flat file of ids).  Quality
is the validation loss in nats per token (:class:`aihpc.scoring.quality.Loss`).

A sample is a window of the data (:class:`aihpc.tasks.language.windows.TokenWindows`):
a document after a begin-of-sequence token, or ``context + 1`` tokens of a
stream.  An epoch is ``epoch_tokens`` tokens of windows drawn afresh, without
replacement, each epoch (the whole training split where it is smaller), so
a trial advances in fixed units of tokens whatever the corpus's size.  The
context is the run's (``context``, or the synthetic documents' length):
growing it is exact (rotary positions have no parameters), but every window
of a run has one length, so the search grows networks, not their context.

The seed network is smaller than compute-optimal for the default budget
(5 minutes), so that growing is needed (:meth:`LanguageTask.min_train_ops`:
Chinchilla's 20 tokens a parameter).  On the CPU (vocabulary 257, context
128): width 48, 2 blocks of 3 heads of 16, MLP 192: 80,208 parameters,
5.8e5 training operations a token, ``min_train_ops`` 9.3e11; a worker of this
project's 2-core CPU did about 5.2e10 operations a second (the default run's
105 GOPS over 2 workers, docs/measurements/2026-11-27-language-task-cpu.md),
1.6e13 in 5 minutes: 17 times the seed's (the previous seed, width 64, was
2.4e12).  On a GPU the seed is sized to fill the device instead: width 1024,
16 blocks of 16 heads of 64, MLP 4096 (202 M parameters, context 1024).  A
benchmark of the machine must run the kernels real training runs; a network
compute-optimal for five minutes of one H200 (about 7 M parameters by this
rule: one worker did 2.2e14 operations a second,
tests/fixtures/h200-lm/results.json, 6.7e16 in 5 minutes) leaves the GPU
mostly waiting on launches, and the run's score would measure that.  There the
seed is past compute-optimal for the default budget, and growth pays only in
longer runs (docs/measurements: the search's value on a GPU is still to
measure).

Operations are counted per window on the meta device (:func:`aihpc.counting.count_ops`):
every matrix product, the attention's two products counted over the full
``T x T`` scores (the causal mask's upper half included, as ``FlopCounterMode``
and PaLM's model-FLOPs convention count it), softmax, norms, GELU, rotary,
the loss over the vocabulary, forward and backward.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aihpc.base.checks import integer
from aihpc.base.config import RunConfig, TaskOptions
from aihpc.base.errors import ConfigError
from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.codec import Record
from aihpc.records.messages import DataRef
from aihpc.records.run_data import LanguageDataRecord
from aihpc.records.trial import Hyperparameters
from aihpc.tasks.base import (
    Arch,
    DataInfo,
    Plan,
    RegionRunner,
    Split,
    StepModel,
    device_autocast,
    own,
)
from aihpc.tasks.language.options import MOVED, LanguageOptions
from aihpc.tasks.language.quality import LOSS, Loss, arch_rows
from aihpc.tasks.quality import ReportQuality

if TYPE_CHECKING:
    import torch

    from aihpc.tasks.language.data import LanguageData
    from aihpc.tasks.language.spec import LMSpec
    from aihpc.tasks.language.windows import TokenWindows

#: The run's data-set name -> aihpc.tasks.language.data's.
LANGUAGES = {"synthetic": "hmm", "text": "text", "tokens": "tokens"}

# By device kind (docs/guide/language.md: how they were chosen and measured).
DEFAULT_CONTEXT = {"cpu": 128, "cuda": 1024}
DEFAULT_EPOCH_TOKENS = {"cpu": 1 << 18, "cuda": 1 << 23}
DEFAULT_SYNTHETIC = {
    "cpu": {"train_tokens": 1 << 21},
    "cuda": {"train_tokens": 1 << 26},
}
DEFAULT_MAX_PARAMS = {"cpu": 2_000_000, "cuda": 700_000_000}
# sequences per step (tokens per step = sequences x context)
DEFAULT_BATCH_SIZES = {"cpu": (8, 16, 32), "cuda": (16, 32, 64)}
# the seed network: width, blocks, heads, head size, MLP width (the module docstring says why)
SEEDS = {
    "cpu": {"width": 48, "layers": 2, "heads": 3, "head_dim": 16, "mlp_hidden": 192},
    "cuda": {"width": 1024, "layers": 16, "heads": 16, "head_dim": 64, "mlp_hidden": 4096},
}
# Training tokens per parameter of a compute-optimal language model (Hoffmann et al. 2022)
TOKENS_PER_PARAM = 20


class LanguageTask:
    """Language modelling (see the module docstring); stateless."""

    name: str = "lm"
    datasets: tuple[str, ...] = tuple(LANGUAGES)
    mlperf_benchmark: str = "aihpc_automl_lm"
    grad_clip: float | None = 1.0
    peak_kernels: tuple[str, ...] = ("matmul",)  # its attention is matmuls too (flash or not)
    # per-block compilation (aihpc.tasks.language.regions) by device kind, the faster way over a
    # search as benchmarks/lm_step.py measures it (a step's time, and what compiling costs a new
    # trial): off on the CPU, where a step gains less than a new block shape costs; on on a GPU,
    # where the fused norms, residual adds and rotary products remove most elementwise passes
    compile_auto: Mapping[str, bool] = MappingProxyType({"cpu": False, "cuda": True})
    options_type: type[TaskOptions] = LanguageOptions
    input_kind: str = "tokens"
    generates: bool = True
    report_quality: ReportQuality = LOSS
    data_record: type[Record] = LanguageDataRecord

    def default_workload(self, config: RunConfig, device: str) -> RunConfig:
        if config.search.screen:
            raise ConfigError(
                f"screen scores CNN children with the image recommender's proxies; the language "
                f"task has none, got screen {config.search.screen}"
            )
        own = _options(config)
        changes: dict[str, Any] = {"epoch_tokens": own.epoch_tokens or DEFAULT_EPOCH_TOKENS[device]}
        if config.run.dataset == "synthetic":  # the documents' length is the context
            doc = own.context or DEFAULT_CONTEXT[device]
            data = {**DEFAULT_SYNTHETIC[device], "doc_length": doc, **own.data_options}
            changes["data_options"] = data
        else:
            changes["context"] = own.context or DEFAULT_CONTEXT[device]
        if config.search.batch_sizes is None:
            changes["batch_sizes"] = list(DEFAULT_BATCH_SIZES[device])
        if config.search.optimizer is None:
            changes["optimizer"] = "adamw"
        return config.replace(**changes)

    def inspect_data(self, config: RunConfig, device: str) -> DataInfo:
        own = _options(config)
        assert own.epoch_tokens is not None, "an epoch's tokens are sized to the device first"
        data = load(DataRef.of(config))
        context = context_of(data, own.ref_options())
        seed = {**SEEDS[device], **own.seed_network}
        info: DataInfo = {
            **data.info(),
            "name": config.run.dataset,
            "vocab_size": vocab_of(data),
            "context": context,
            "seed_network": seed,
            "epoch_tokens": own.epoch_tokens,
        }
        train, val = windows(data, context)
        info.update(num_train=len(train), num_val=len(val), val_predicted=val.predicted_tokens)
        seed_params = self.seed_arch(info).num_params()
        max_params = config.search.max_params or DEFAULT_MAX_PARAMS[device]
        if seed_params > max_params:
            raise ConfigError(
                f"max_params must be at least the seed network's {seed_params} parameters, "
                f"got {max_params}"
            )
        return {**info, "max_params": max_params}

    def quality(self, config: RunConfig, data: DataInfo) -> Loss:
        unigram = float(data["unigram_loss"])
        threshold = _options(config).max_val_loss
        if threshold is None:
            threshold = data.get("bigram_loss") or unigram
        return Loss(
            unigram=unigram,
            max_loss=float(threshold),
            floor=data.get("floor"),
            resolution=1.0 / math.sqrt(max(int(data.get("val_predicted") or 1), 1)),
            bytes_per_token=data.get("bytes_per_token"),
        )

    def search_space(self, config: RunConfig) -> SearchSpace:
        search = config.search
        assert search.batch_sizes is not None, "batch sizes are sized to the device first"
        optimizer = search.optimizer or "adamw"
        lr_low, lr_high = (1e-4, 3e-3) if optimizer == "adamw" else (1e-3, 0.3)
        return SearchSpace(
            floats=(
                ("lr", lr_low, lr_high, True),
                ("warmup", 0.0, 0.2, False),
                ("weight_decay", 1e-3, 0.3, True),
            ),
            choices=(("batch_size", tuple(search.batch_sizes)),),
            fixed=(("optimizer", optimizer), ("schedule", search.schedule), ("dropout", 0.0)),
        )

    def default_hparams(self, config: RunConfig) -> Hyperparameters:
        """AdamW at 1e-3 (SGD: 0.03) with weight decay 0.1, a warm-up over 5 % of the schedule,
        the middle batch size: the usual values for small GPT-style decoders."""
        search = config.search
        assert search.batch_sizes is not None, "batch sizes are sized to the device first"
        sizes = sorted(search.batch_sizes)
        optimizer = search.optimizer or "adamw"
        return Hyperparameters(
            lr=1e-3 if optimizer == "adamw" else 0.03,
            batch_size=sizes[(len(sizes) - 1) // 2],
            weight_decay=0.1,
            optimizer=optimizer,
            schedule=search.schedule,
            warmup=0.05,
        )

    def min_train_ops(self, arch: Arch, data: DataInfo) -> float:
        """Chinchilla's compute-optimal rule (Hoffmann et al. 2022): :data:`TOKENS_PER_PARAM`
        training tokens per parameter, at the architecture's counted training operations per
        token (a window's over its ``context`` predicted tokens)."""
        spec = _lm(arch)
        train, _ = self.recount_per_sample(spec, 1, 0.0)
        return TOKENS_PER_PARAM * spec.num_params() * train / spec.context

    def seed_arch(self, data: DataInfo) -> LMSpec:
        from aihpc.tasks.language.spec import seed_lm_spec

        return seed_lm_spec(
            vocab_size=int(data["vocab_size"]), context=int(data["context"]), **data["seed_network"]
        )

    def arch(self, data: dict[str, Any]) -> LMSpec:
        from aihpc.tasks.language.spec import LMSpec

        return LMSpec.from_dict(data)

    def arch_reader(self) -> Callable[[dict[str, Any]], LMSpec]:
        """:meth:`arch` itself: a language model's spec is a few numbers per block."""
        return self.arch

    def plan(self, arch: Arch, rng: random.Random, max_params: int | None) -> Plan:
        from aihpc.tasks.language.morphism import random_lm_plan

        return random_lm_plan(_lm(arch), rng, max_params)

    def model(self, arch: Arch) -> torch.nn.Module:
        from aihpc.tasks.language.net import LMNet

        return LMNet(_lm(arch))

    def model_input(self, arch: Arch) -> tuple[tuple[int, ...], int | None]:
        """``context`` token ids of a vocabulary of ``vocab_size``."""
        spec = _lm(arch)
        return (spec.context,), spec.vocab_size

    def step_model(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        world: int,
        cache: RegionRunner | None,
    ) -> StepModel:
        """An :class:`aihpc.tasks.language.regions.LMStep`: its blocks compiled one by one
        where ``cache`` is given, its passes on bfloat16 compute weights with the float32
        parameters as master where :data:`aihpc.tasks.language.regions.COMPUTE_DTYPE` says so
        for the device (then without autocast: the logits come back in float32 for the loss),
        in one process only (data-parallel ranks keep float32 weights under autocast); else the
        network itself, under bfloat16 autocast on a GPU."""
        import contextlib

        from aihpc.tasks.language.net import LMNet
        from aihpc.tasks.language.regions import COMPUTE_DTYPE, LMStep

        if not isinstance(model, LMNet):
            raise TypeError(f"the language task's models are LMNets, got {type(model).__name__}")
        autocast = device_autocast(device)
        dtype = COMPUTE_DTYPE.get(device.type) if world == 1 else None
        if dtype is None and cache is None:
            return StepModel(model, autocast)
        step = LMStep(model, compute_dtype=dtype, cache=cache)
        step.follow(optimizer)
        passes = autocast if dtype is None else contextlib.nullcontext()
        return StepModel(step, passes, step.compiled_modes, step.regions_needed())

    def region_signatures(self, arch: Arch) -> frozenset[str]:
        from aihpc.tasks.language.regions import block_regions

        return frozenset(r.signature for r in block_regions(_lm(arch)))

    def count_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        """Operations per window of ``arch.context + 1`` tokens (its ``context`` predicted)."""
        import torch

        from aihpc.counting import count_ops
        from aihpc.tasks.language.net import FlatLogits

        spec = _lm(arch)
        meta = torch.device("meta")
        with meta:
            model = FlatLogits(self.model(spec))
        x = torch.zeros((batch, spec.context), dtype=torch.long, device=meta)
        y = torch.zeros(batch * spec.context, dtype=torch.long, device=meta)
        train = count_ops(model, (x,), train=True, target=y).total / batch
        infer = count_ops(model, (x,), train=False).total / batch
        return train, infer

    def model_flops(self, arch: Arch, train_samples: int) -> float | None:
        """``train_samples`` windows of ``context`` tokens at :func:`model_flops_per_token`."""
        spec = _lm(arch)
        return float(train_samples * spec.context * model_flops_per_token(spec))

    def recount_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        """:meth:`count_per_sample`'s numbers in closed form (:mod:`aihpc.tasks.language.count`)."""
        from aihpc.tasks.language.count import count_lm_per_sample

        key = (arch.content_hash(), batch)
        if key not in _RECOUNTS:
            _RECOUNTS[key] = count_lm_per_sample(_lm(arch), batch, dropout)
        return _RECOUNTS[key]

    def splits(self, ref: DataRef) -> tuple[Split, Split]:
        data = load(ref)
        return windows(data, context_of(data, ref.options_dict()))

    def staging_dtype(self, device: torch.device) -> torch.dtype:
        import torch

        return torch.int32

    def sample_shape(self, arch: Arch) -> tuple[int, ...]:
        """A window: ``context + 1`` tokens (the inputs and, shifted by one, the targets)."""
        return (_lm(arch).context + 1,)

    def epoch_samples(self, ref: DataRef, train_samples: int) -> int:
        options = ref.options_dict()
        tokens = int(options.get("epoch_tokens") or 0)
        context = int(options.get("context") or options.get("doc_length") or 0)
        if not tokens or not context:
            return train_samples
        return max(1, min(train_samples, tokens // context))

    def augment(self, xb: torch.Tensor, ref: DataRef, gen: torch.Generator) -> torch.Tensor:
        """The windows as they are: a language model trains on its text unchanged."""
        return xb

    def inputs_and_targets(
        self, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return xb[:, :-1].long(), xb[:, 1:].long()

    def decode_ops(self, arch: Arch, prompt_tokens: int, new_tokens: int) -> tuple[float, float]:
        """:func:`aihpc.tasks.language.decode.decode_ops` (ValueError where the prompt and the
        new tokens do not fit the context)."""
        from aihpc.tasks.language.decode import decode_ops

        return decode_ops(_lm(arch), prompt_tokens, new_tokens)

    def arch_rows(self, arch: Mapping[str, Any]) -> list[tuple[str, str]]:
        return arch_rows(arch)


_RECOUNTS: dict[tuple[str, int], tuple[float, float]] = {}


def model_flops_per_token(arch: LMSpec) -> int:
    """PaLM's model FLOPs of one trained token (Chowdhery et al. 2022, appendix B):
    6N + 12·L·H·Q·T, N the parameters that take part in matrix products (all but the token
    embedding, a lookup), and per block 12·H·Q·T for the attention's two products over the
    context T forward and backward (H heads of size Q; summed over the blocks, whose heads may
    differ).  What Megatron-LM and torchtitan divide by time and the vendor's peak for their
    utilisation; aihpc's own count (every operation, the loss and elementwise work included)
    stands beside it."""
    matmul_params = arch.num_params() - arch.vocab_size * arch.width
    attention = sum(12 * b.heads * arch.head_dim * arch.context for b in arch.blocks)
    return 6 * matmul_params + attention


def load(ref: DataRef) -> LanguageData:
    """The language data set ``ref`` names (its task options set aside)."""
    from aihpc.tasks.language.data import load_language

    options = {k: v for k, v in ref.options_dict().items() if k not in MOVED}
    name = LANGUAGES.get(ref.name)
    if name is None:
        raise ConfigError(
            f"dataset for the language task must be one of {', '.join(LANGUAGES)}, got {ref.name!r}"
        )
    return load_language(name, path=ref.path, seed=ref.seed, **options)


def vocab_of(data: LanguageData) -> int:
    """The model's vocabulary: the data's, and a begin-of-sequence token where the data are
    documents (its id is the data's vocabulary size)."""
    return int(data.vocab_size) + (1 if data.doc_length is not None else 0)


def context_of(data: LanguageData, options: Mapping[str, Any]) -> int:
    """The tokens a model reads per window: a document's length, or the ``context`` option."""
    if data.doc_length is not None:
        return int(data.doc_length)
    return integer("context", options.get("context"))


def windows(data: LanguageData, context: int) -> tuple[TokenWindows, TokenWindows]:
    """The training and validation windows of ``data`` for ``context``."""
    from aihpc.tasks.language.windows import TokenWindows

    bos = data.vocab_size if data.doc_length is not None else None
    train, val = (
        TokenWindows(tokens, context + 1, data.doc_length, bos) for tokens in (data.train, data.val)
    )
    return train, val


def _options(config: RunConfig) -> LanguageOptions:
    """The language task's own settings of ``config`` (a TypeError for another task's)."""
    return own(config.options, LanguageOptions, "the language task's settings")


def _lm(arch: Arch) -> LMSpec:
    """``arch`` as the language task's architecture (a TypeError for another task's)."""
    from aihpc.tasks.language.spec import LMSpec

    return own(arch, LMSpec, "the language task's architectures")
