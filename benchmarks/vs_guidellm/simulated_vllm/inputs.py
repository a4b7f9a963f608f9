"""``vllm.inputs`` of the simulated stand-in: the prompt types."""

from batchmark.runner.engines.simulated import TokensPrompt

__all__ = ["TokensPrompt"]
