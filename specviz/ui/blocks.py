"""gr.Blocks without the cost of the outputs a frame leaves alone.

The page's events may update many components (Run streams the whole live view), and a
handler's dict names only those that change (specviz.ui.page). gradio 6.31 fills every
unnamed output with ``gr.skip()`` and then treats that skip as a property update: it builds
a fresh component from the stored one's constructor arguments and rebuilds that
component's entry in the session's config, its API schema included. That is about 1.5 ms
per output per frame: on a small model, most of a Run's server time went there.

A bare skip (no property, no value) changes nothing, and what gradio sends for it is
``{"__type__": "update"}`` (for gr.HTML with that marker echoed as a custom property, which
sets nothing). :meth:`Blocks.postprocess_data` sends exactly that for each such
output and hands gradio the outputs the frame does set, so every other path (values,
property updates, state, files) is gradio's own. tests/test_blocks.py checks the result
against gradio's for mixed frames.

The queue also waits between its looks for work: gradio 6.31 looks every millisecond while
it has nothing to start (no event waiting, or every event waiting on a busy slot), and every
10 ms for progress to send, so a server with nothing to do woke a thousand times a second
on a machine the model shares (a Space, a lecturer's laptop). :meth:`Blocks.queue` sets the
looks to QUEUE_POLL_S and PROGRESS_POLL_S: an event waits at most 20 ms more to start, and
an idle server with a page open uses about a third of the CPU it did (docs/deploying.md).
"""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr
from gradio.blocks import Block, BlockFunction, convert_component_dict_to_list

SKIP: dict[str, str] = {"__type__": "update"}  # what gr.skip() returns, and gradio sends

QUEUE_POLL_S = 0.02  # between the queue's looks for an event it can start (gradio: 0.001)
PROGRESS_POLL_S = 0.1  # between its looks for progress to send (gradio: 0.01)
POLLS = {"sleep_when_free": QUEUE_POLL_S, "progress_update_sleep_when_free": PROGRESS_POLL_S}


def is_bare_skip(value: Any) -> bool:
    return isinstance(value, dict) and value == SKIP


class Blocks(gr.Blocks):
    """The page's Blocks: gradio's, with bare skips sent as they are and a queue that looks
    for work less often (see the module)."""

    def queue(self, *args: Any, **kwargs: Any) -> Blocks:
        """gradio's queue (every call: Blocks makes one when built, the app another with
        its limits), with its looks for work spaced as POLLS says."""
        super().queue(*args, **kwargs)
        for name, seconds in POLLS.items():
            if not hasattr(self._queue, name):  # a gradio without this wait: left as it is
                continue
            setattr(self._queue, name, seconds)
        return self

    async def postprocess_data(
        self, block_fn: BlockFunction, predictions: Any, state: Any
    ) -> list[Any]:
        outputs = list(block_fn.outputs)
        if len(outputs) < 2 or block_fn.batch or block_fn.is_validator_function:
            return await super().postprocess_data(block_fn, predictions, state)
        if is_bare_skip(predictions):  # one skip() for every output
            predictions = [dict(SKIP) for _ in outputs]
        elif (
            isinstance(predictions, dict)
            and predictions
            and all(isinstance(k, Block) for k in predictions)
        ):
            predictions = convert_component_dict_to_list(outputs, predictions)
        if not isinstance(predictions, (list, tuple)) or len(predictions) != len(outputs):
            return await super().postprocess_data(block_fn, predictions, state)
        keep = [
            i
            for i, (block, value) in enumerate(zip(outputs, predictions, strict=True))
            if block.stateful or not is_bare_skip(value)
        ]
        if len(keep) == len(outputs):
            return await super().postprocess_data(block_fn, list(predictions), state)
        result: list[Any] = [dict(SKIP) for _ in outputs]
        if keep:
            some = copy.copy(block_fn)
            some.outputs = [outputs[i] for i in keep]
            values = [predictions[i] for i in keep]
            # gradio wraps the value of a one-output function in a list itself
            done = await super().postprocess_data(
                some, values[0] if len(keep) == 1 else values, state
            )
            for i, value in zip(keep, done, strict=True):
                result[i] = value
        return result
