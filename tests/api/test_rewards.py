"""``radconcord.rewards.reward_fn``: TRL's reward-function signature, warm models, GRPO.

The GRPO test runs TRL's real ``GRPOTrainer`` for one step on a tiny randomly initialised
Llama with a word-level tokenizer built here (no download): the trainer calls the reward with
``prompts``, ``completions``, ``completion_ids``, ``trainer_state`` and the dataset's
``reference`` column, and logs it under the reward's name.
"""

from __future__ import annotations

import math
import pickle

import pytest

import radconcord
from radconcord.rewards import MetricReward, completion_text, reward_fn

REFS = ["No pleural effusion. Heart size is normal.", "Small left pneumothorax."]
COMPLETIONS = ["No effusion. Heart size normal.", "Left pneumothorax, small."]


def test_reward_equals_score_for_strings_and_chat_messages():
    reward = reward_fn("bleu4")
    expected = radconcord.score(references=REFS, candidates=COMPLETIONS, metrics=["bleu4"])
    as_text = reward(prompts=["p1", "p2"], completions=COMPLETIONS, reference=REFS)
    as_chat = reward(
        prompts=[[{"role": "user", "content": "p1"}], [{"role": "user", "content": "p2"}]],
        completions=[[{"role": "assistant", "content": c}] for c in COMPLETIONS],
        reference=REFS, completion_ids=[[1], [2]], trainer_state=object(),
    )
    assert as_text == as_chat == list(expected["bleu4"])
    assert all(isinstance(v, float) for v in as_text)
    assert reward.__name__ == "radconcord_bleu4"


def test_reference_column_and_empty_completions():
    reward = reward_fn("bleu2_radcliq", reference_column="solution")  # a family with one key
    assert reward.key == "bleu2_radcliq"
    values = reward(completions=[COMPLETIONS[0], "   "], solution=REFS)
    assert values[0] == radconcord.score(references=REFS[:1], candidates=COMPLETIONS[:1],
                                         metrics=["bleu2_radcliq"])["bleu2_radcliq"].iloc[0]
    assert values[1] == 0.0
    with pytest.raises(radconcord.InputError, match="'rouge' gives 3 keys"):
        reward_fn("rouge")  # rouge1, rouge2, rougeL: name one
    assert reward_fn("rougeL", empty_value=None)(completions=[""], reference=["x"]) == [None]
    with pytest.raises(radconcord.InputError, match="no 'reference' column.*got: solution"):
        reward_fn("rougeL")(completions=["a"], solution=["b"])
    with pytest.raises(radconcord.InputError, match="2 completions but 1 references"):
        reward_fn("rougeL")(completions=["a", "b"], reference=["b"])


def test_completion_text_forms():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert completion_text([{"role": "assistant", "content": [
        {"type": "text", "text": "Lungs "}, {"type": "image"}, {"type": "text", "text": "clear."}]}]
    ) == "Lungs clear."
    # Tool or user turns inside a completion are not the report.
    assert completion_text([{"role": "assistant", "content": "A."},
                            {"role": "tool", "content": "{...}"},
                            {"role": "assistant", "content": "B."}]) == "A.\nB."
    with pytest.raises(radconcord.InputError, match="got int"):
        completion_text(3)


def test_reward_fn_checks_its_metric_and_options_up_front():
    with pytest.raises(radconcord.InputError, match="4 keys"):
        reward_fn("bleu")
    with pytest.raises(radconcord.InputError, match="nosuch"):
        reward_fn("nosuch")
    with pytest.raises(radconcord.InputError, match="not pairs|uncertainty"):
        reward_fn("smas_var")
    with pytest.raises(radconcord.InputError, match="nope"):
        reward_fn("rougeL", nope=True)
    assert reward_fn("rougeL", use_stemmer=False).options == {"use_stemmer": False}


def test_lower_is_better_keys_are_negated():
    """radcliq_v1 is lower-is-better: the reward is -value unless orient=False."""
    assert reward_fn("radcliq_v1").higher_is_better is False
    reward = reward_fn("rougeL")
    assert reward.higher_is_better
    # Same arithmetic on an available key, forcing the direction.
    reward.higher_is_better = False
    negated = reward(completions=COMPLETIONS, reference=REFS)
    plain = reward_fn("rougeL")(completions=COMPLETIONS, reference=REFS)
    assert negated == [-v for v in plain]


def test_model_metric_stays_warm_between_calls_and_pickles_without_it(monkeypatch):
    """BERTScore (packaged MiniLM): one metric instance and one model for every call."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reward = reward_fn("bertscore_f", device="cpu")
    first = reward(completions=COMPLETIONS, reference=REFS)
    pool = reward.pool
    held = len(pool.resources)
    assert pool.created == 1 and held >= 2  # the metric instance and its encoder
    second = reward(completions=list(reversed(COMPLETIONS)), reference=list(reversed(REFS)))
    assert reward.pool is pool and pool.created == 1 and len(pool.resources) == held
    assert second == list(reversed(first))
    assert all(0.0 < v <= 1.0 for v in first)

    copy = pickle.loads(pickle.dumps(reward))
    assert isinstance(copy, MetricReward) and copy._pool is None
    assert copy(completions=COMPLETIONS, reference=REFS) == first
    reward.close()
    assert reward._pool is None


def _tiny_policy():
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ("no pleural effusion heart size is normal small left right pneumothorax . :"
             " report findings").split()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    return LlamaForCausalLM(config), tokenizer


def test_grpo_trainer_calls_the_reward_with_the_reference_column(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _tiny_policy()
    references = ["no pleural effusion .", "small left pneumothorax ."]
    data = Dataset.from_dict({"prompt": ["report :", "findings :"], "reference": references})
    reward = reward_fn("bleu1")
    calls: list[tuple[list[str], list[str], list[float]]] = []

    def spy(prompts, completions, **kwargs):
        out = reward(prompts=prompts, completions=completions, **kwargs)
        calls.append((list(completions), list(kwargs["reference"]), out))
        assert "trainer_state" in kwargs and "completion_ids" in kwargs
        return out

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=6, max_steps=1, report_to=[],
                      use_cpu=True, logging_steps=1, save_strategy="no", bf16=False,
                      fp16=False, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward, spy],
                          args=args, train_dataset=data)
    trainer.train()

    assert len(calls) == 1
    completions, refs, values = calls[0]
    assert len(completions) == len(refs) == 4 and set(refs) == set(references)
    expected = radconcord.score(references=refs, candidates=completions, metrics=["bleu1"])
    assert values == [0.0 if math.isnan(v) else v for v in expected["bleu1"]]
    logged = trainer.state.log_history[0]
    assert logged["rewards/radconcord_bleu1/mean"] == pytest.approx(sum(values) / len(values))
