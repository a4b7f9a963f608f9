"""The BatchBenchmark resource (batchmark.dev/v1alpha1): its spec, its status and the operator's defaults.

The benchmark part of the spec is the runner's own config models (backend, data, profile, constraints,
sampleRequests), so the CLI, a config file and the CRD never drift; the rest says how to run it on Kubernetes.
Field names are camelCase, as Kubernetes writes them. The CRD's schema is generated from these models
(batchmark.operator.resource.crd).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from batchmark.operator.resource.status import Phase
from batchmark.runner import __version__, contract
from batchmark.runner.config.arguments import DEFAULT_LINGER_SECONDS, MAX_LINGER_SECONDS
from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.config.base import (
    MAX_CONSTRAINTS,
    MAX_REPEATS,
    MAX_REPLICAS,
    MAX_SAMPLE_REQUESTS,
    MAX_SWEEP_BENCHMARKS,
)
from batchmark.runner.config.constraints import ConstraintConfig
from batchmark.runner.config.cost import CostConfig
from batchmark.runner.config.data import DataConfig
from batchmark.runner.config.profiles import ProfileConfig
from batchmark.runner.config.run import RunConfig
from batchmark.runner.config.store import MAX_STORE_LENGTH, S3Location, s3_endpoint, store_location
from batchmark.runner.config.sweep import SweepConfig
from batchmark.runner.engines.registry import engine_entry
from batchmark.runner.statusfields import (
    BenchmarkSummary,
    EngineStatus,
    Headline,
    ProgressStatus,
    RegressionStatus,
    RunnerImageStatus,
)

# The resource's identity is part of the operator–runner contract; named here for the operator's modules.
GROUP = contract.GROUP
VERSION = contract.VERSION
KIND = contract.KIND
PLURAL = contract.PLURAL
SINGULAR = "batchbenchmark"
SHORT_NAME = "bb"
CATEGORY = "batchmark"
API_VERSION = contract.API_VERSION

DEFAULT_IMAGE = f"ghcr.io/batchmark/batchmark-runner:{__version__}"
DEFAULT_CPU_IMAGE = f"ghcr.io/batchmark/batchmark-runner-cpu:{__version__}"
DEFAULT_METRICS_PORT = 8000
GPU_RESOURCE = "nvidia.com/gpu"
# What an S3 results store gives the runner's container, the AWS way the runner reads it
# (batchmark.runner.config.store): the endpoint, the region, and the keys of credentialsSecret under their own
# names (the session token optional).
S3_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"
S3_REGION_VARIABLE = "AWS_REGION"
S3_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
S3_OPTIONAL_CREDENTIAL_KEYS = ("AWS_SESSION_TOKEN",)
# Per field of an S3 store, the variables of spec.env that would contradict it: the one it sets, and those read
# before it (the runner takes AWS_ENDPOINT_URL_S3 first, and AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true for AWS
# itself; pyarrow's AWS SDK reads AWS_DEFAULT_REGION before AWS_REGION).
S3_STORE_VARIABLES: dict[str, tuple[str, ...]] = {
    "endpoint": (S3_ENDPOINT_VARIABLE, "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"),
    "region": (S3_REGION_VARIABLE, "AWS_DEFAULT_REGION"),
    "credentialsSecret": S3_CREDENTIAL_KEYS,
}


# A quantity as Kubernetes writes it: 2, "500m", "2Gi".
Quantity = int | str
# Where the engine runs: on GPUs (vLLM's CUDA build, the runner image) or on the CPU (vLLM's CPU build, the CPU
# runner image).
Device = Literal["gpu", "cpu"]


class ApiModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
    )


# --- Kubernetes types the spec passes on to the pod ---------------------------------------------------------


class LocalObjectReference(ApiModel):
    """A reference to an object in the same namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the object.")


class SecretKeySelector(ApiModel):
    """A key of a Secret in the benchmark's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(default="token", min_length=1, max_length=253, description="Key in the Secret.")


class ResourceRequirements(ApiModel):
    """Compute resources of the runner container, as in a pod spec."""

    limits: dict[str, Quantity] | None = Field(
        default=None, description="Most of each resource the container may use (e.g. nvidia.com/gpu: 1)."
    )
    requests: dict[str, Quantity] | None = Field(
        default=None, description="Resources the scheduler reserves for the container."
    )


class Toleration(ApiModel):
    """A toleration of a node taint, as in a pod spec."""

    key: str | None = Field(default=None, max_length=317, description="Taint key; empty with Exists: all taints.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (default).")
    value: str | None = Field(default=None, max_length=63, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty: all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )


class EnvVar(ApiModel):
    """An environment variable of the runner container, as in a pod spec."""

    name: str = Field(min_length=1, max_length=253, description="Variable name.")
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="Source of the value (secretKeyRef, configMapKeyRef, fieldRef, ...)."
    )


class ModelCache(ApiModel):
    """A PersistentVolumeClaim holding downloaded models, so a benchmark does not download them again."""

    claim_name: str = Field(min_length=1, max_length=253, description="Name of the PersistentVolumeClaim.")
    mount_path: str = Field(default="/models", pattern=r"^/", description="Where it is mounted; HF_HOME points at it.")


class DataVolume(ApiModel):
    """Where the user's data files come from in the pod, mounted read-only: a ConfigMap (small files, one key a
    file) or a PersistentVolumeClaim; data.path names a file or folder under mountPath."""

    config_map: str | None = Field(
        default=None, min_length=1, max_length=253, description="ConfigMap whose keys become files (at most 1 MiB)."
    )
    claim_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="PersistentVolumeClaim holding the data."
    )
    mount_path: str = Field(default="/data", pattern=r"^/", description="Where it is mounted in the runner.")

    @model_validator(mode="after")
    def _one_source(self) -> DataVolume:
        if (self.config_map is None) == (self.claim_name is None):
            raise ValueError("give one of configMap or claimName")
        return self


class ResultsStore(ApiModel):
    """Where the benchmark's runs are kept beyond the resource, each whole (results, HTML report, config,
    fingerprint) under runs/MODEL/HARDWARE/DATE/, with an index that `batchmark history` reads: a
    PersistentVolumeClaim (claimName, path), or a bucket of an S3-compatible object store (url; endpoint, region,
    credentialsSecret). Give one of claimName or url."""

    claim_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="Name of the PersistentVolumeClaim, mounted in the pod (not with url).",
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        description="The store's folder in the claim, relative to its root (default: the root); only with claimName.",
    )
    url: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_STORE_LENGTH,
        description="A bucket of an S3-compatible object store, s3://BUCKET[/PREFIX] (the runs and their index under"
        " PREFIX), as `batchmark run --store` takes it; the bucket must exist. Before the run the runner puts and"
        " deletes a probe object there, and fails at once (InvalidConfig) when it cannot. Not with claimName.",
    )
    endpoint: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="The S3 server, http(s)://HOST[:PORT] (e.g. MinIO's, SeaweedFS's, Ceph's), given to the runner as"
        " AWS_ENDPOINT_URL; default: AWS itself. Only with url.",
    )
    region: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$",
        description="The bucket's region (e.g. eu-west-1), given to the runner as AWS_REGION; default: the SDK's"
        " (us-east-1 where nothing says). Only with url.",
    )
    credentials_secret: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="A Secret in the benchmark's namespace with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        " (and optionally AWS_SESSION_TOKEN), given to the runner as those variables; default: none, the pod's own"
        " identity (e.g. IRSA or workload identity through its ServiceAccount, or the node's). Only with url.",
    )

    @field_validator("path")
    @classmethod
    def _inside_the_claim(cls, path: str | None) -> str | None:
        if path is not None and (path.startswith("/") or ".." in path.split("/")):
            raise ValueError(f"{path!r} must be a relative path inside the claim, without '..'")
        return path

    @field_validator("url")
    @classmethod
    def _an_s3_bucket(cls, url: str | None) -> str | None:
        if url is not None and not isinstance(store_location(url), S3Location):
            raise ValueError(
                f"{url!r} is not an S3 bucket: give s3://BUCKET[/PREFIX] (for a folder, a PersistentVolumeClaim:"
                " claimName and path)"
            )
        return url

    @field_validator("endpoint")
    @classmethod
    def _an_s3_server(cls, endpoint: str | None) -> str | None:
        if endpoint is None:
            return None
        try:
            server = s3_endpoint({S3_ENDPOINT_VARIABLE: endpoint})
        except ValueError as error:
            raise ValueError(str(error).removeprefix(f"{S3_ENDPOINT_VARIABLE}: ")) from None
        if server is None:
            raise ValueError(f"{endpoint!r} names no S3 server: give http:// or https://HOST[:PORT], or leave it out")
        return endpoint

    @model_validator(mode="after")
    def _one_kind(self) -> ResultsStore:
        if (self.claim_name is None) == (self.url is None):
            raise ValueError(
                "give one of claimName (a PersistentVolumeClaim) or url (an S3 bucket, s3://BUCKET[/PREFIX])"
            )
        if self.url is not None and self.path is not None:
            raise ValueError("path is the store's folder in claimName: in an S3 bucket, give it as url's PREFIX")
        if self.claim_name is not None:
            given = [field for field, value in self._s3_fields().items() if value is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only with url (an S3 bucket), not with claimName")
        return self

    def _s3_fields(self) -> dict[str, str | None]:
        return {"endpoint": self.endpoint, "region": self.region, "credentialsSecret": self.credentials_secret}

    def env_conflict(self, env: Sequence[EnvVar], store: str) -> str | None:
        """Why ``env`` (spec.env) cannot go with this store, named ``store`` in the message: a variable that one
        of its fields gives the runner too, or that the runner reads before it (one would silently win over the
        other); None when they go together."""
        given = {field for field, value in self._s3_fields().items() if value is not None}
        for index, variable in enumerate(env):
            for field, names in S3_STORE_VARIABLES.items():
                if field in given and variable.name in names:
                    return (
                        f"spec.env[{index}]: {variable.name} would contradict {store}.{field}, which the operator"
                        f" gives the runner as {_given_as(field)}"
                    )
        return None


def _given_as(field: str) -> str:
    if field == "credentialsSecret":
        return f"{', '.join(S3_CREDENTIAL_KEYS[:-1])} and {S3_CREDENTIAL_KEYS[-1]} (from the Secret)"
    return S3_STORE_VARIABLES[field][0]


class ResultsOptions(ApiModel):
    """Where the benchmark's results go beyond its status and ConfigMap."""

    store: ResultsStore | None = Field(
        default=None,
        description="A results store: a PersistentVolumeClaim (claimName) or an S3-compatible bucket (url).",
    )


class MetricsOptions(ApiModel):
    """The runner's live Prometheus metrics and the optional Pushgateway push."""

    enabled: bool = Field(default=True, description="Serve /metrics from the runner while it runs.")
    port: int = Field(
        default=DEFAULT_METRICS_PORT,
        ge=1,
        le=65535,
        description="Port of the runner's /metrics, declared as the container port named 'metrics' for a PodMonitor.",
    )
    pushgateway: str | None = Field(
        default=None, pattern=r"^https?://", description="Pushgateway URL the final results are pushed to."
    )
    linger_seconds: float = Field(
        default=DEFAULT_LINGER_SECONDS,
        ge=0,
        le=MAX_LINGER_SECONDS,
        description="Seconds the runner keeps serving /metrics after its run, so that Prometheus scrapes the final "
        "values (`batchmark run --metrics-linger`). The pod, and its GPUs, are held that much longer: at least one "
        "scrape interval where Prometheus scrapes the pod, 0 where nothing does.",
    )


# The longest start bound a spec or the defaults may give (a week): longer is no bound at all, and a bound past
# what a date can hold would end the operator's arithmetic rather than the benchmark.
MAX_START_TIMEOUT_SECONDS = 7 * 24 * 3600
DEFAULT_PENDING_SECONDS = 3600
DEFAULT_IMAGE_PULL_SECONDS = 900
DEFAULT_CONTAINER_CREATE_SECONDS = 900
StartSeconds = Annotated[int, Field(ge=1, le=MAX_START_TIMEOUT_SECONDS)]


class StartTimeouts(ApiModel):
    """How long the benchmark's pod may take to start before the benchmark ends Failed with the kubelet's or
    the scheduler's reason; each unset one is the operator's (the chart's benchmarkDefaults.timeouts). Time
    queued in Kueue never counts: a queued benchmark's pod exists only once Kueue admitted it."""

    pending: StartSeconds | None = Field(
        default=None,
        description="Seconds the pod may wait for a node, from its creation (reason Unschedulable; a Job that"
        " creates no pod: PodNotCreated, from the Job's start).",
    )
    image_pull: StartSeconds | None = Field(
        default=None,
        description="Seconds from the pod's scheduling after which an image the node cannot get ends it (reason"
        " ErrImagePull, ImagePullBackOff, ErrImageNeverPull or InvalidImageName).",
    )
    container_create: StartSeconds | None = Field(
        default=None,
        description="Seconds from the pod's scheduling after which a container the kubelet cannot create ends it"
        " (reason CreateContainerConfigError, e.g. a root image under runAsNonRoot, or CreateContainerError).",
    )


# The most pods one benchmark may span: a JobSet of this many single-pod Jobs (a fleet of 16 nodes of 8 GPUs
# at one replica a pod is 128).
MAX_PODS = 256
# Pods one engine may span: vLLM's documented multi-node engines span 2 to 4 nodes; far above that is a typo.
MAX_NODES_PER_REPLICA = 16
# The vLLM settings of an engine across pods that the runner derives from each pod's place in it.
ENGINE_NODE_SETTINGS = ("nnodes", "node_rank", "master_addr", "master_port", "data_parallel_size")


class Parallelism(ApiModel):
    """How many engine replicas the benchmark measures at once, and how they are laid over pods. Each replica is
    an independent engine on its own devices; all are fed by one load per pod and measured over one common window.
    One pod (replicas = replicasPerPod) runs as a Job, like a benchmark without parallelism; above one pod the
    operator creates one JobSet (jobset.x-k8s.io, which must be installed), whose pods start together or not at
    all and, with queueName, are admitted by Kueue as one workload. Each pod writes its own results; the
    operator merges them into the benchmark's (sums over the window all pods measured, latency distributions
    merged from the pods' sketches)."""

    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_PODS * MAX_REPLICAS,
        strict=True,
        description="Engine replicas of the benchmark in all (the fleet measured), over all its pods.",
    )
    replicas_per_pod: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        strict=True,
        description="Engine replicas in each pod (backend.replicas of each pod's run): the pod's GPUs are split"
        " evenly among them, tensor_parallel_size x pipeline_parallel_size each (on cpu, its CPUs). It must divide"
        " replicas.",
    )
    nodes_per_replica: int = Field(
        default=1,
        ge=1,
        le=MAX_NODES_PER_REPLICA,
        strict=True,
        description="Pods (nodes) one engine replica spans, with vLLM's multiprocessing executor across nodes"
        " (engine vllm only): the first pod of each replica runs the benchmark and its vLLM engine (node rank 0,"
        " the rendezvous), the others only that engine's workers (vLLM's headless nodes). tensor_parallel_size x"
        " pipeline_parallel_size is the engine's GPUs over all its pods, so it must be a multiple of this;"
        " replicasPerPod must then be 1.",
    )

    @model_validator(mode="after")
    def _whole_pods(self) -> Parallelism:
        if self.replicas % self.replicas_per_pod:
            raise ValueError(
                f"replicasPerPod ({self.replicas_per_pod}) does not divide replicas ({self.replicas}):"
                " every pod runs the same number of replicas"
            )
        if self.nodes_per_replica > 1 and self.replicas_per_pod > 1:
            raise ValueError(
                f"nodesPerReplica ({self.nodes_per_replica}) spans each replica over several pods, so a pod holds"
                f" part of one replica, not replicasPerPod ({self.replicas_per_pod}) of them: leave replicasPerPod 1"
            )
        if self.pods > MAX_PODS:
            raise ValueError(
                f"{self.pods} pods (replicas / replicasPerPod x nodesPerReplica) is above the {MAX_PODS} one"
                " benchmark may span; put more replicas in each pod"
            )
        return self

    @property
    def pods(self) -> int:
        """Pods in all: the replicas' pods, each replica's nodes one pod each."""
        return self.replicas // self.replicas_per_pod * self.nodes_per_replica


# --- the resource -------------------------------------------------------------------------------------------


class BatchBenchmarkSpec(ApiModel):
    """A benchmark (the runner's configuration) and how to run it as a Job."""

    backend: BackendConfig = Field(description="The backend and the engine behind it.")
    data: DataConfig = Field(description="The requests to send.")
    profile: ProfileConfig = Field(description="When to send them.")
    constraints: list[ConstraintConfig] = Field(
        min_length=1, max_length=MAX_CONSTRAINTS, description="When each benchmark stops; at least one must bound it."
    )
    sample_requests: int = Field(
        default=20, ge=0, le=MAX_SAMPLE_REQUESTS, description="Per-request records kept in the full results."
    )
    sweep: SweepConfig | None = Field(
        default=None,
        description="Backend settings to run the whole profile at, in one Job and one engine load for all that"
        f" leave the engine alone; at most {MAX_SWEEP_BENCHMARKS} benchmarks in all.",
    )
    slo: dict[str, float] | None = Field(
        default=None,
        description="Latency budget, DISTRIBUTION_STATISTIC to seconds, e.g. request_latency_p99: 2.0, ttft_p95: 0.5:"
        " each benchmark reports whether it met every target and its goodput; the best that met it is recommended.",
    )
    cost: CostConfig | None = Field(default=None, description="GPU price, to report cost per million tokens.")
    parallelism: Parallelism | None = Field(
        default=None,
        description="Engine replicas measured at once, in one pod or over several (a JobSet); default: one.",
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=MAX_REPEATS,
        description="Times each benchmark (each sweep point) is measured on the one engine load; figures are then"
        " reported as mean with a 95% confidence interval.",
    )
    device: Device | None = Field(
        default=None,
        description="Where the engine runs: gpu, or cpu (vLLM's CPU build, in the CPU runner image: the pod asks"
        " for no nvidia.com/gpu, tolerates no GPU taint, and resources naming GPUs are refused). Default: the"
        " operator's device, else gpu.",
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        description=f"Runner image; default: the operator's (its cpuImage for device cpu), else {DEFAULT_IMAGE}"
        f" ({DEFAULT_CPU_IMAGE} for device cpu).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="When the image is pulled."
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, description="Secrets for pulling the image from a private registry."
    )
    resources: ResourceRequirements | None = Field(
        default=None,
        description=(
            "Resources of the runner container, merged with the engine's needs: with engine vllm, a"
            " limit of tensor_parallel_size x pipeline_parallel_size (from vllmConfig) nvidia.com/gpu unless"
            " nvidia.com/gpu is given here (0: none), and the GPU taint tolerated when GPUs are asked for"
            " and tolerations is unset; requests of cpu and memory where neither a request nor a limit is"
            " given here (vllm: 2 and 8Gi, simulated: 100m and 256Mi)."
        ),
    )
    node_selector: dict[str, str] | None = Field(default=None, description="Node labels the pod must match.")
    tolerations: list[Toleration] | None = Field(default=None, description="Taints the pod tolerates.")
    affinity: dict[str, Any] | None = Field(default=None, description="Pod affinity rules, as in a pod spec.")
    priority_class_name: str | None = Field(
        default=None,
        description=(
            "PriorityClass of the pod. With queueName, also Kueue's WorkloadPriorityClass of that name when one"
            " exists (the priority Kueue queues and preempts by)."
        ),
    )
    queue_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description=(
            "Kueue LocalQueue (in the benchmark's namespace) to wait in for GPU quota: the Job is created"
            " suspended with the kueue.x-k8s.io/queue-name label and runs once Kueue admits it. Default: the"
            " operator's queueName. Refused (phase Failed, reason KueueNotInstalled) where Kueue is not installed."
        ),
    )
    runtime_class_name: str | None = Field(default=None, description="RuntimeClass of the pod (e.g. nvidia).")
    env: list[EnvVar] | None = Field(default=None, description="Extra environment of the runner container.")
    env_from: list[dict[str, Any]] | None = Field(
        default=None, description="Environment from Secrets or ConfigMaps (secretRef, configMapRef), as in a pod."
    )
    hf_token_secret: SecretKeySelector | None = Field(
        default=None, description="Secret key holding a Hugging Face token, given to the runner as HF_TOKEN."
    )
    model_cache: ModelCache | None = Field(default=None, description="A volume of downloaded models.")
    data_volume: DataVolume | None = Field(
        default=None, description="The volume data.path reads from (a Hugging Face hub dataset uses modelCache)."
    )
    shm_size: Quantity = Field(
        default="2Gi", description="Size of /dev/shm, an in-memory volume (vLLM's workers share tensors there)."
    )
    timeout: int | None = Field(
        default=None, ge=1, description="Seconds the Job may run before it is stopped (activeDeadlineSeconds)."
    )
    timeouts: StartTimeouts | None = Field(
        default=None,
        description="How long the pod may take to start (each unset one: the operator's default); unlike timeout,"
        " they end a benchmark whose pod never starts, with the kubelet's reason.",
    )
    retries: int = Field(default=0, ge=0, le=10, description="Times a failed pod is replaced (backoffLimit).")
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Seconds after which the finished Job and its pod are deleted."
    )
    cancel: bool = Field(
        default=False, description="true stops a running benchmark; its partial results are kept (Cancelled)."
    )
    metrics: MetricsOptions = Field(
        default_factory=MetricsOptions, description="The runner's Prometheus metrics and Pushgateway."
    )
    results: ResultsOptions | None = Field(
        default=None, description="Where the results are kept beyond the resource (results.store)."
    )
    baseline: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Judge the run against this run in results.store: its run id, or 'last', the latest complete"
        " run of the same workload (its fingerprint) that started before it. The Regressed condition says whether"
        " its output tokens/s fell significantly (Welch's t-test on the repeats: give repeats 3 or more) and by"
        " more than 5%; Unknown without repeats or without such a run.",
    )

    @model_validator(mode="after")
    def _stored_runs(self) -> BatchBenchmarkSpec:
        store = self.results.store if self.results is not None else None
        if self.baseline is not None and store is None:
            raise ValueError("spec.baseline: the baseline is a run in a results store: give spec.results.store too")
        if store is not None and self.pods > 1:
            raise ValueError(
                "spec.results.store: a benchmark over several pods cannot keep its runs in a store yet (each pod"
                " would store its own share); its merged results are in the status and `batchmark results`"
            )
        conflict = store.env_conflict(self.env or [], "spec.results.store") if store is not None else None
        if conflict is not None:
            raise ValueError(f"{conflict}: say it in one place")
        return self

    @model_validator(mode="after")
    def _no_gpus_on_cpu(self) -> BatchBenchmarkSpec:
        if self.device == "cpu" and self.resources is not None:
            for kind, amounts in (("limits", self.resources.limits), ("requests", self.resources.requests)):
                if str((amounts or {}).get(GPU_RESOURCE, "0")) not in ("0", ""):
                    raise ValueError(f"device is cpu but resources.{kind} asks for {GPU_RESOURCE}")
        return self

    @model_validator(mode="after")
    def _replicas_fit(self) -> BatchBenchmarkSpec:
        if self.parallelism is None:
            return self
        if self.backend.replicas != 1:
            raise ValueError(
                "spec.backend.replicas: give the replicas in spec.parallelism (replicasPerPod for those of one pod),"
                " not also here"
            )
        if self.pods > 1 and self.metrics.pushgateway:
            # Each pod would push its own results under the benchmark's one grouping key, the last overwriting.
            raise ValueError(
                "spec.metrics.pushgateway: a benchmark over several pods pushes no results to a Pushgateway (each pod"
                " would overwrite the others'); Prometheus scrapes each pod's /metrics, and the status and"
                " `batchmark results` hold the merged results"
            )
        swept = self.sweep.replicas if self.sweep is not None else None
        if swept and max(swept) > self.pod_replicas:
            raise ValueError(
                f"spec.sweep.replicas goes up to {max(swept)}, above spec.parallelism.replicasPerPod"
                f" ({self.pod_replicas}): a pod has devices for that many replicas at most"
            )
        self._check_engine_nodes()
        per_replica = self.replica_gpus
        given = self.resources.limits if self.resources is not None else None
        gpus = str((given or {}).get(GPU_RESOURCE, ""))
        if per_replica and self.device != "cpu" and gpus.isdigit() and int(gpus) < per_replica * self.pod_replicas:
            what = (
                f"one pod of an engine over {self.engine_nodes} pods, tensor_parallel_size x pipeline_parallel_size"
                f" / nodesPerReplica ({per_replica}) GPUs"
                if self.engine_nodes > 1
                else f"spec.parallelism.replicasPerPod ({self.pod_replicas}) replicas of tensor_parallel_size x"
                f" pipeline_parallel_size ({per_replica}) GPUs each"
            )
            raise ValueError(
                f"spec.resources.limits.{GPU_RESOURCE} ({gpus}) is too few for {what}: give"
                f" {per_replica * self.pod_replicas}, or leave it out for the operator to ask for as many"
            )
        return self

    def _check_engine_nodes(self) -> None:
        """An engine over several pods: vLLM's, on its multiprocessing executor, loaded once, its GPUs a whole
        number per pod."""
        nodes = self.engine_nodes
        if nodes == 1:
            return
        where = "spec.parallelism.nodesPerReplica"
        if engine_entry(self.backend.engine).node_args is None:
            raise ValueError(
                f"{where} ({nodes}): engine {self.backend.engine} runs in one pod (only vllm spans several), so"
                " nodes would mean nothing: use replicas for more engines"
            )
        settings = self.backend.vllm_config or {}
        derived = [name for name in ENGINE_NODE_SETTINGS if name in settings]
        if derived:
            raise ValueError(
                f"spec.backend.vllmConfig.{derived[0]}: with {where} ({nodes}) each pod's runner sets vLLM's"
                f" {', '.join(ENGINE_NODE_SETTINGS)} from its place in the engine: leave them out"
            )
        executor = settings.get("distributed_executor_backend", "mp")
        if executor != "mp":
            raise ValueError(
                f"spec.backend.vllmConfig.distributed_executor_backend: {executor!r} with {where} ({nodes}); an"
                " engine over several pods runs on vLLM's multiprocessing executor across nodes ('mp', nnodes):"
                " leave it out or give 'mp'"
            )
        ranks = engine_entry(self.backend.engine).pod.gpus(settings, "spec.backend.vllmConfig")
        if ranks % nodes:
            raise ValueError(
                f"{where} ({nodes}) does not divide tensor_parallel_size x pipeline_parallel_size ({ranks}) of"
                " spec.backend.vllmConfig: every pod of the engine holds as many of its ranks (its GPUs)"
            )
        reloading = self.sweep.reloading_fields() if self.sweep is not None else []
        if reloading:
            raise ValueError(
                f"spec.sweep.{reloading[0]}: a sweep that reloads the engine cannot run with {where} ({nodes}):"
                " the other pods' vLLM workers join one engine load; sweep the settings that leave the engine"
                " alone, or run one benchmark per value"
            )

    @property
    def engine_nodes(self) -> int:
        """Pods each engine replica spans (its nodes)."""
        return self.parallelism.nodes_per_replica if self.parallelism is not None else 1

    @property
    def replica_gpus(self) -> int:
        """GPUs of one replica in one pod: tensor_parallel_size x pipeline_parallel_size of vllmConfig, over the
        pods it spans."""
        ranks = engine_entry(self.backend.engine).pod.gpus(self.backend.vllm_config, "spec.backend.vllmConfig")
        return ranks // self.engine_nodes

    @property
    def pod_replicas(self) -> int:
        """Engine replicas in each pod."""
        return self.parallelism.replicas_per_pod if self.parallelism is not None else self.backend.replicas

    @property
    def pods(self) -> int:
        """Pods the benchmark runs in at once (above 1: a JobSet)."""
        return self.parallelism.pods if self.parallelism is not None else 1

    def run_config(self, name: str) -> RunConfig:
        """The runner's config for this benchmark (the CR's name is the benchmark's name), as each pod runs it."""
        backend = self.backend.model_copy(update={"replicas": self.pod_replicas})
        return RunConfig.model_validate(
            {
                "name": name,
                "backend": backend,
                "data": self.data,
                "profile": self.profile,
                "constraints": self.constraints,
                "sample_requests": self.sample_requests,
                "sweep": self.sweep,
                "slo": self.slo or {},
                "cost": self.cost,
                "repeats": self.repeats,
                "store": self.store_folder,
                "baseline": self.baseline,
            }
        )

    @property
    def store_folder(self) -> str | None:
        """The results store as the runner's config names it: the claim's folder in the pod, or the bucket's
        s3:// URL (None: no store)."""
        store = self.results.store if self.results is not None else None
        if store is None:
            return None
        if store.url is not None:
            return store.url
        return f"{contract.STORE_MOUNT_PATH}/{store.path or ''}".rstrip("/")


class Condition(ApiModel):
    """A condition, as Kubernetes writes them (kubectl wait --for=condition=Complete reads these)."""

    type: str = Field(
        description="Scheduled, EngineLoaded, Complete, Failed or Retrying; with Kueue also Admitted, Preempted."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.")
    message: str = Field(default="", description="What a person needs to know.")
    last_transition_time: str = Field(description="When the status last changed, RFC 3339.")
    observed_generation: int | None = Field(default=None, description="The spec generation it describes.")


class Preemption(ApiModel):
    """One time Kueue preempted the benchmark to give its quota to another: that attempt's pod was stopped,
    and the benchmark went back to its queue to run again."""

    time: str = Field(description="When Kueue preempted it, RFC 3339.")
    attempt: int = Field(description="The attempt it ended (see attempts).")
    reason: str = Field(description="Kueue's reason, e.g. InClusterQueue or InCohortReclamation.")
    message: str = Field(default="", description="Kueue's message: what preempted it.")
    run_id: str | None = Field(default=None, description="Id of the preempted attempt's run, if it wrote results.")
    results: list[BenchmarkSummary] | None = Field(
        default=None, description="The results the preempted attempt had when it stopped (kept, never lost)."
    )


class QueueStatus(ApiModel):
    """Where a Queued benchmark waits, as Kueue's visibility API reports it; absent where that API is not served,
    and once Kueue admitted the benchmark."""

    name: str = Field(description="The LocalQueue it waits in.")
    position: int = Field(
        ge=0, description="Its position in the LocalQueue, as Kueue counts it: 0 is the next to be admitted."
    )
    cluster_queue_position: int = Field(
        ge=0, description="Its position among the pending workloads of all LocalQueues of the ClusterQueue (from 0)."
    )


# The docstring is the CRD's description of the status: it names the decision's module as it was before the
# package had rooms (now controller.status), so that the CRD stays byte for byte.
class BatchBenchmarkStatus(ApiModel):
    """Where the benchmark is, and its results. Each field has one writer (see batchmark.operator.status)."""

    phase: Phase | None = Field(default=None, description="Pending, Queued, Scheduling, LoadingEngine, Running, ...")
    reason: str | None = Field(default=None, description="Why the phase is what it is, one CamelCase word.")
    message: str | None = Field(default=None, description="The reason in words.")
    conditions: list[Condition] | None = Field(
        default=None,
        description="Scheduled, EngineLoaded, Complete, Failed, Retrying (a pod failed and the Job runs another, with"
        " why); with Kueue also Admitted, Preempted.",
    )
    observed_generation: int | None = Field(default=None, description="The spec generation last acted on.")
    job_name: str | None = Field(default=None, description="The benchmark's Job.")
    pod_name: str | None = Field(default=None, description="The Job's current (or last) pod.")
    node_name: str | None = Field(default=None, description="Node the pod runs on.")
    start_time: str | None = Field(default=None, description="When the Job was created, RFC 3339.")
    completion_time: str | None = Field(default=None, description="When the benchmark finished, RFC 3339.")
    attempts: int | None = Field(
        default=None, description="Pods started so far (1 + retries used + times Kueue preempted it)."
    )
    replicas: int | None = Field(
        default=None,
        description="Engine replicas measured at once, over all its pods (spec.parallelism.replicas, else"
        " spec.backend.replicas): kubectl get's REPLICAS.",
    )
    preemptions: list[Preemption] | None = Field(
        default=None, max_length=20, description="Times Kueue preempted it, oldest first, with their results."
    )
    queue: QueueStatus | None = Field(
        default=None, description="While Queued: its position in its Kueue LocalQueue, where Kueue reports it."
    )
    runner_image: RunnerImageStatus | None = Field(
        default=None,
        description="The runner image its current pod runs, with its digest, as the pod's kubelet reports it; the"
        " runner records it in its report and the fingerprint of each stored run.",
    )
    results_config_map: str | None = Field(
        default=None,
        description="ConfigMap holding the full report, which the runner creates (one per attempt: the latest).",
    )
    run_id: str | None = Field(default=None, description="Id of the runner's run (in the full report too).")
    progress: ProgressStatus | None = Field(default=None, description="The run in progress (written by the runner).")
    engine: EngineStatus | None = Field(default=None, description="The engine that ran (written by the runner).")
    results: list[BenchmarkSummary] | None = Field(
        default=None, description="One compact entry per benchmark (written by the runner)."
    )
    headline: Headline | None = Field(default=None, description="The best benchmark's figures, for kubectl get.")
    regression: RegressionStatus | None = Field(
        default=None, description="The run against spec.baseline (written by the runner); see the Regressed condition."
    )


class BatchBenchmark(ApiModel):
    """A BatchBenchmark as the operator reads it."""

    spec: BatchBenchmarkSpec = Field(description="The benchmark and how to run it.")
    status: BatchBenchmarkStatus = Field(
        default_factory=BatchBenchmarkStatus, description="Observed state, written by the operator and the runner."
    )


# --- the operator's defaults (--defaults FILE) -------------------------------------------------------------


# The operator's default results store, as the chart names it.
DEFAULT_STORE = "benchmarkDefaults.results.store"
_DEFAULTED_FIELDS = (
    "image",
    "image_pull_policy",
    "image_pull_secrets",
    "resources",
    "tolerations",
    "node_selector",
    "model_cache",
    "hf_token_secret",
    "queue_name",
    "results",
)


class RunnerIdentity(ApiModel):
    """The user and groups benchmark pods run as (their pod securityContext). A null one is left out of the pod,
    for the platform to assign (OpenShift's restricted policy: a UID from the namespace's range, GID 0) or, where
    nothing assigns it, the image's own (runner image: UID and GID 10001)."""

    run_as_user: int | None = Field(
        default=contract.RUNNER_UID, ge=1, description="runAsUser; null: the platform's (or the image's user)."
    )
    run_as_group: int | None = Field(
        default=contract.RUNNER_GID, ge=0, description="runAsGroup (0 as OpenShift gives); null: the platform's."
    )
    fs_group: int | None = Field(
        default=contract.RUNNER_GID,
        ge=0,
        description="fsGroup, the group that owns the pod's volumes (a model cache's too); null: the platform's.",
    )

    def pod_fields(self) -> dict[str, int]:
        """The pod securityContext's ID fields that are set."""
        fields = {"runAsUser": self.run_as_user, "runAsGroup": self.run_as_group, "fsGroup": self.fs_group}
        return {key: value for key, value in fields.items() if value is not None}


class StartBounds(ApiModel):
    """The operator's start bounds (every one set: every benchmark has an end), in seconds; see StartTimeouts."""

    pending: StartSeconds = Field(default=DEFAULT_PENDING_SECONDS, description="Seconds to get a node.")
    image_pull: StartSeconds = Field(
        default=DEFAULT_IMAGE_PULL_SECONDS,
        description="Seconds from scheduling within which an image error must clear.",
    )
    container_create: StartSeconds = Field(
        default=DEFAULT_CONTAINER_CREATE_SECONDS,
        description="Seconds from scheduling within which a container creation error must clear.",
    )


class OperatorDefaults(ApiModel):
    """What the operator fills in where a BatchBenchmark's spec says nothing (the chart sets these)."""

    device: Device | None = Field(
        default=None, description="Where engines run (gpu or cpu), where a spec says nothing."
    )
    image: str | None = Field(default=None, min_length=1, description="Runner image.")
    cpu_image: str | None = Field(default=None, min_length=1, description="Runner image of the benchmarks on cpu.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="When the image is pulled."
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, description="Secrets for pulling the image."
    )
    resources: ResourceRequirements | None = Field(default=None, description="Resources of the runner container.")
    tolerations: list[Toleration] | None = Field(default=None, description="Taints the pod tolerates.")
    node_selector: dict[str, str] | None = Field(default=None, description="Node labels the pod must match.")
    model_cache: ModelCache | None = Field(default=None, description="A volume of downloaded models.")
    hf_token_secret: SecretKeySelector | None = Field(default=None, description="Secret key with an HF token.")
    queue_name: str | None = Field(default=None, description="Kueue LocalQueue the Jobs are submitted to.")
    results: ResultsOptions | None = Field(
        default=None, description="The results store of one-pod benchmarks whose spec names none."
    )
    # Not a spec field: which user a pod runs as is the cluster's policy, set once by whoever installs the operator.
    security_context: RunnerIdentity = Field(
        default_factory=RunnerIdentity, description="The IDs every benchmark pod runs as; null ones are the platform's."
    )

    timeouts: StartBounds = Field(
        default_factory=StartBounds,
        description="How long a benchmark's pod may take to start, where its spec.timeouts says nothing.",
    )

    def bounds(self, spec_timeouts: StartTimeouts | None) -> StartBounds:
        """The start bounds of a benchmark: its spec's, else these."""
        given = spec_timeouts.model_dump(exclude_none=True) if spec_timeouts is not None else {}
        return self.timeouts.model_copy(update=given)

    def apply(self, spec: BatchBenchmarkSpec) -> BatchBenchmarkSpec:
        """The spec with these defaults where it sets nothing; its device decided (gpu where neither says)."""
        updates = {
            name: getattr(self, name)
            for name in _DEFAULTED_FIELDS
            if getattr(spec, name) is None and getattr(self, name) is not None
        }
        if spec.pods > 1:
            updates.pop("results", None)  # a benchmark over several pods keeps no runs in a store (yet)
        store = self.results.store if "results" in updates and self.results is not None else None
        conflict = store.env_conflict(spec.env or [], DEFAULT_STORE) if store is not None else None
        if conflict is not None:
            raise ValueError(
                f"{conflict} (the operator's default store): leave it out of spec.env, or give the benchmark its own"
                " spec.results.store"
            )
        device = spec.device or self.device or "gpu"
        updates["device"] = device
        if device == "cpu" and spec.image is None:
            updates["image"] = self.cpu_image or DEFAULT_CPU_IMAGE
        return spec.model_copy(update=updates)
