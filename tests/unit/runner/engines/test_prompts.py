from batchmark.runner.config.data import SyntheticTextDataConfig
from batchmark.runner.data.requests import SyntheticText
from batchmark.runner.engines.prompts import TokenPromptFactory


def test_prompt_lengths_are_exact_and_prompts_unique() -> None:
    data = SyntheticText(SyntheticTextDataConfig(prompt_tokens=64, prompt_tokens_stdev=20, output_tokens=8, samples=50))
    factory = TokenPromptFactory.for_vocabulary(2048, {0, 1, 2}, seed=5)
    prompts = [factory.token_ids(data.spec(i)) for i in range(2000)]
    assert [len(p) for p in prompts] == [data.spec(i).prompt_tokens for i in range(2000)]
    assert len({tuple(p) for p in prompts}) == 2000
    assert all(token not in (0, 1, 2) for p in prompts for token in p)


def test_lengths_respect_bounds_and_seed() -> None:
    config = SyntheticTextDataConfig(
        prompt_tokens=100,
        prompt_tokens_stdev=50,
        prompt_tokens_min=80,
        prompt_tokens_max=120,
        output_tokens=5,
    )
    lengths = [SyntheticText(config).spec(i).prompt_tokens for i in range(1000)]
    assert min(lengths) >= 80
    assert max(lengths) <= 120
    assert lengths == [SyntheticText(config).spec(i).prompt_tokens for i in range(1000)]


def test_shared_prefix_is_shared_and_the_rest_unique() -> None:
    data = SyntheticText(SyntheticTextDataConfig(prompt_tokens=16, output_tokens=4, prefix_tokens=32, prefix_count=2))
    factory = TokenPromptFactory.for_vocabulary(1000, set(), seed=1)
    prompts = [factory.token_ids(data.spec(i)) for i in range(6)]
    assert all(len(p) == 48 for p in prompts)
    assert prompts[0][:32] == prompts[2][:32] == prompts[4][:32]
    assert prompts[1][:32] == prompts[3][:32]
    assert prompts[0][:32] != prompts[1][:32]
    assert len({tuple(p[32:]) for p in prompts}) == 6
