"""concord as a TRL reward (issue 27): fewer predicted errors, higher reward; no model loaded."""

from __future__ import annotations

from radconcord.rewards import reward_fn

REFERENCE = "Heart size is normal. No pleural effusion. No pneumothorax."


def test_concord_reward_is_minus_the_predicted_errors():
    reward = reward_fn("concord_total")
    completions = [
        "Heart size is normal. No pleural effusion. No pneumothorax.",  # same findings
        "Small right pleural effusion. No pneumothorax. Heart size is normal.",  # one false
        "Large left pleural effusion. Right pneumothorax. Heart size is normal.",  # two false
        [{"role": "assistant", "content": "The heart is normal in size. No effusion."}],
    ]
    got = reward(prompts=["p"] * 4, completions=completions, reference=[REFERENCE] * 4)
    assert got == [0.0, -1.0, -2.0, 0.0]
    significant = reward_fn("concord_sig")(
        prompts=["p"], completions=[completions[2]], reference=[REFERENCE])
    assert significant == [-2.0]
