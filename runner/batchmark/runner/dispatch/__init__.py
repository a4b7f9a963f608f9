"""GuideLLM's vllm_python_batch backend, rebuilt: micro-batches into vLLM's ``LLM`` in a worker process."""
