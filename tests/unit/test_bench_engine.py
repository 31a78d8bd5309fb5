"""gammatune_tools.bench.engine: measuring a prompt set, with a stand-in engine."""

from types import SimpleNamespace

from gammatune_tools.bench.engine import generate, measure


class FakeLLM:
    """Answers every conversation with its length; counts one draft per call."""

    def __init__(self):
        self.calls, self.drafts = [], 0

    def chat(self, conversations, params, use_tqdm=False):
        self.calls.append(conversations)
        self.drafts += 1
        return [SimpleNamespace(outputs=[SimpleNamespace(
            text=f"answer{len(conv)}", token_ids=[1] * len(conv))]) for conv in conversations]

    def generate(self, prompts, params, use_tqdm=False):
        return [f"plain {p}" for p in prompts]

    def get_metrics(self):
        return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=self.drafts)]


def test_generate_chats_for_conversations_and_generates_for_text():
    llm = FakeLLM()
    assert generate(llm, ["a"], None) == ["plain a"]
    assert len(generate(llm, [[{"role": "user", "content": "a"}]], None)) == 1
    assert len(llm.calls) == 1


def test_measure_sends_second_turn_after_the_models_answer():
    llm = FakeLLM()
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    seen = []
    result = measure(llm, "m", 2, prompts, None, batch_size=2, on_outputs=seen.append,
                     follow_ups=[["q0-second"], [], ["q2-second"]])
    # warm-up, batch [0, 1] turn 1, [0] turn 2, [2] turn 1, [2] turn 2
    assert [len(c) for c in llm.calls] == [1, 2, 1, 1, 1]
    assert llm.calls[2][0] == [{"role": "user", "content": "q0"},
                               {"role": "assistant", "content": "answer1"},
                               {"role": "user", "content": "q0-second"}]
    assert [(b["indices"], b["turn"]) for b in result.batches] == [
        ([0, 1], 1), ([0], 2), ([2], 1), ([2], 2)]
    assert result.num_requests == 5 and len(seen) == 4
    assert result.output_tokens == 1 + 1 + 3 + 1 + 3
    assert result.drafts == 4 and [b["drafts"] for b in result.batches] == [1, 1, 1, 1]
