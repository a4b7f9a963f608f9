"""Engines behind the vllm_python_batch backend: the real vLLM ``LLM`` or a simulation of its speed."""
