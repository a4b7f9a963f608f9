from batchmark.runner.config import VllmPythonBatchBackendConfig
from batchmark.runner.data import RequestSpec
from batchmark.runner.engines.base import WorkItem
from batchmark.runner.engines.factory import load_engine


def items(*prompt_lengths: int) -> list[WorkItem]:
    return [WorkItem(RequestSpec(i, length, 4, -1, 0), 0.0, 0.0) for i, length in enumerate(prompt_lengths)]


def test_a_bad_request_fails_alone_and_the_batch_completes() -> None:
    simulated = load_engine(
        VllmPythonBatchBackendConfig(
            model="m", engine="simulated", vllm_config={"max_model_len": 64}, simulation={"time_scale": 0}
        ),
        seed=1,
    )
    completions = simulated.run_batch(items(8, 100, 16, 32, 65))
    by_id = {completion.request_id: completion for completion in completions}
    assert sorted(by_id) == [0, 1, 2, 3, 4]
    assert by_id[1].error is not None
    assert "longer than the maximum model length" in by_id[1].error
    assert by_id[4].error is not None
    for good in (0, 2, 3):
        assert by_id[good].error is None
        assert by_id[good].output_tokens == 4
    assert by_id[2].prompt_tokens == 16


def test_engine_timings_are_reported() -> None:
    simulated = load_engine(
        VllmPythonBatchBackendConfig(model="m", engine="simulated", simulation={"time_scale": 0}), seed=1
    )
    [completion] = simulated.run_batch(items(8))
    assert completion.timings.to_first_token >= 0
    assert completion.timings.decode >= 0
