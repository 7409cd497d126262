"""What one batch of queries runs, at the fixed sizes of :mod:`aihpc.infer.batches`.

:class:`Classify`: an image classifier's forward pass on a batch of inputs
copied into the size's input buffer (channels-last on a GPU); the answer is
each real sample's top class.  :class:`Generate`: a language model's greedy
answers with a key-value cache of fixed shape (:class:`~aihpc.tasks.language.decode.
StaticDecoder`, one per size, the smaller ones' caches the first rows of the
largest's); its first token is reported as soon as the prefill gives it, then
the whole answer with its number of tokens, for LoadGen's time to first token
and time per output token.

Both run in the served dtype (autocast, its weight cache off so that a
captured graph holds no cast it frees: the casts run in each call) under
inference mode; each call of a size's work returns once its answers are on
the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from aihpc.infer.accuracy import autocast_for
from aihpc.infer.batches import FixedBatches, padded, size_for


def _served(call: Callable[[], Any], device: torch.device, dtype: str) -> Callable[[], Any]:
    """``call`` under inference mode and the served dtype's autocast."""

    def run() -> Any:
        with torch.inference_mode(), autocast_for(device, dtype):
            return call()

    return run


class Classify(FixedBatches):
    """A classifier's forward pass on a batch of inputs, in the served dtype."""

    def __init__(
        self,
        model: torch.nn.Module,
        inputs: torch.Tensor,
        device: torch.device,
        dtype: str,
        sizes: tuple[int, ...],
        channels_last: bool = False,
    ) -> None:
        super().__init__(device, sizes, int(inputs.shape[0]))
        layout = torch.channels_last if channels_last else torch.contiguous_format
        self.model = model
        self.inputs = inputs.to(device).contiguous(memory_format=layout)
        shape = (max(sizes), *inputs.shape[1:])
        self.buffer = torch.zeros(shape, dtype=inputs.dtype, device=device)
        self.buffer = self.buffer.contiguous(memory_format=layout)
        self.calls = {size: (self._forward(self.buffer[:size], device, dtype),) for size in sizes}

    def _forward(self, x: torch.Tensor, device: torch.device, dtype: str) -> Callable[[], Any]:
        return _served(lambda: self.model(x), device, dtype)

    def logits(self, indices: list[int]) -> torch.Tensor:
        """The outputs of the samples ``indices`` (at most the largest size), computed in a
        padded batch; on the device, not waited for."""
        size = size_for(self.sizes, len(indices))
        self.buffer[:size].copy_(self.inputs[padded(indices, size)])
        (forward,) = self.calls[size]
        logits: torch.Tensor = forward()
        return logits[: len(indices)]

    def serve(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        self.logits(indices).argmax(-1).cpu()  # waits for the device: the answers exist
        return [1] * len(indices)


class Generate(FixedBatches):
    """A language model's greedy answer of ``new_tokens`` tokens to each prompt of a batch."""

    def __init__(
        self,
        model: Any,  # an aihpc.tasks.language.net.LMNet
        prompts: torch.Tensor,
        new_tokens: int,
        device: torch.device,
        dtype: str,
        sizes: tuple[int, ...],
    ) -> None:
        from aihpc.tasks.language.decode import StaticDecoder

        super().__init__(device, sizes, int(prompts.shape[0]))
        self.prompts = prompts.to(device)
        cache_dtype = None if dtype == "float32" else getattr(torch, dtype)
        length = int(prompts.shape[1])
        largest = StaticDecoder(model, max(sizes), length, new_tokens, dtype=cache_dtype)
        self.decoders = {
            size: largest
            if size == max(sizes)
            else StaticDecoder(model, size, length, new_tokens, cache=largest.cache.rows(size))
            for size in sizes
        }
        self.calls = {
            size: (_served(d.prefill, device, dtype), _served(d.step, device, dtype))
            for size, d in self.decoders.items()
        }

    def answers(self, indices: list[int], on_token: Any = None) -> torch.Tensor:
        """The answers ``(len(indices), new_tokens)`` to the prompts ``indices``, generated in
        a padded batch; ``on_token(i, tokens)`` as :meth:`StaticDecoder.answer` calls it."""
        size = size_for(self.sizes, len(indices))
        prefill, step = self.calls[size]
        prompt = self.prompts[padded(indices, size)]
        return self.decoders[size].answer(prompt, on_token, prefill, step)[: len(indices)]

    def serve(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        def on_token(step: int, tokens: torch.Tensor) -> None:
            if step == 0:
                tokens.cpu()  # waits for the device: the first tokens exist
                for i in range(len(indices)):
                    first_token(i)

        self.answers(indices, on_token).cpu()
        return [self.decoders[max(self.sizes)].new_tokens] * len(indices)
