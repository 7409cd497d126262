"""A run's ``data`` (results.json's, the store's): the data set as its task described it, one
record per task.

An image run's (:class:`ImageDataRecord`: the images' shape, classes, splits,
the generator of a synthetic set and its accuracy ceiling) and a language
model run's (:class:`LanguageDataRecord`: tokens, vocabulary, context, the
reference losses) differ; a run's task names its own
(:attr:`aihpc.tasks.base.Task.data_record`), which is how results.json's reader and writer
choose.  Both name the data set, its splits' sizes, the parameter bound the search kept to and
the seed network.
"""

from __future__ import annotations

from typing import Any

from aihpc.records.codec import Record


class ImageDataRecord(Record, frozen=True):
    """The images of an image run: ``input_shape`` (C, H, W), ``num_classes``, the splits'
    sizes, ``description``; ``generator`` (a synthetic set's parameters) and ``ceiling`` (the
    best accuracy its generator allows, where affordable to estimate) None otherwise."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    num_train: int
    num_val: int
    max_params: int
    description: str
    generator: dict[str, Any] | None
    ceiling: dict[str, Any] | None
    seed_network: dict[str, Any] | None = None  # absent in older files


class LanguageDataRecord(Record, frozen=True):
    """The tokens of a language model run: windows of ``context`` tokens (``num_train``,
    ``num_val``; ``val_predicted`` tokens scored), the vocabulary, the reference losses in nats
    per token (``unigram_loss``, ``bigram_loss``, the synthetic generator's ``floor``) and where
    the tokens came from."""

    name: str
    vocab_size: int
    context: int
    num_train: int
    num_val: int
    max_params: int
    unigram_loss: float
    bigram_loss: float | None
    floor: float | None
    bytes_per_token: float | None
    doc_length: int | None
    generator: dict[str, Any] | None
    source: str
    dtype: str
    file_backed: bool
    train_tokens: int
    val_tokens: int
    epoch_tokens: int
    seed_network: dict[str, Any]
    val_predicted: int | None = None


DataRecord = ImageDataRecord | LanguageDataRecord
