"""The answer-prefix baseline (ppo.prefix_baseline_ev): what the returns
alone explain from the answer so far, the reference a critic's EV is read
against. Small batches whose figures are worked out by hand."""
import math

import torch

import ppo

S, H, W, T, X = 1, 2, 3, 4, 5   # token IDs: start, the deciding token (two of them), a tail, an unseen token


def rows(seqs, mask_from=0):
    """Padded inputs and mask as a training forward has them: loss from
    mask_from on (position 0 is the prompt's last token when mask_from is 0)."""
    n = max(len(s) for s in seqs)
    inputs = torch.zeros(len(seqs), n, dtype=torch.long)
    mask = torch.zeros(len(seqs), n, dtype=torch.bool)
    for i, s in enumerate(seqs):
        inputs[i, :len(s)] = torch.tensor(s)
        mask[i, mask_from:len(s)] = True
    return inputs, mask


def returns(mask, rs):
    return mask.double() * torch.tensor(rs, dtype=torch.float64)[:, None]


def flags(*bits):
    return torch.tensor([bool(b) for b in bits])


def test_a_return_decided_one_token_in_leaves_one_value_in_four_unexplained():
    # fitted: two hello (return 1), two world (0); scored: one of each.
    seqs = [[S, H, T, T], [S, H, T, T], [S, W, T, T], [S, W, T, T], [S, H, T, T], [S, W, T, T]]
    inputs, mask = rows(seqs)
    ret = returns(mask, [1, 1, 0, 0, 1, 0])
    ev = ppo.prefix_baseline_ev(inputs, mask, ret, flags(1, 1, 1, 1, 0, 0), flags(0, 0, 0, 0, 1, 1))
    # Only the value at [S] (0.5) misses, by 0.5 either way: Var(residual) 0.0625 of Var(return) 0.25.
    assert math.isclose(ev, 0.75, abs_tol=1e-9), ev


def test_an_unseen_token_backs_off_to_the_longest_prefix_seen():
    seqs = [[S, H, T, T], [S, W, T, T], [S, H, X, X]]
    inputs, mask = rows(seqs)
    ret = returns(mask, [1, 0, 1])
    # The scored row's [S,H] is seen (value 1), [S,H,X] and on are not: they keep 1, its return. Its [S] is 0.5.
    ev = ppo.prefix_baseline_ev(inputs, mask, ret, flags(1, 1, 0), flags(0, 0, 1))
    assert math.isnan(ev), "one scored row's returns do not vary: undefined"
    seqs.append([S, W, X, X])
    inputs, mask = rows(seqs)
    ret = returns(mask, [1, 0, 1, 0])
    ev = ppo.prefix_baseline_ev(inputs, mask, ret, flags(1, 1, 0, 0), flags(0, 0, 1, 1))
    assert math.isclose(ev, 0.75, abs_tol=1e-9), ev


def test_leave_one_out_scores_each_row_against_the_others_only():
    seqs = [[S, H, T], [S, H, T], [S, W, T], [S, W, T]]
    inputs, mask = rows(seqs)
    ret = returns(mask, [1, 1, 0, 0])
    every = flags(1, 1, 1, 1)
    ev = ppo.prefix_baseline_ev(inputs, mask, ret, every, every, leave_one_out=True)
    # At [S] a hello row is valued at the others' mean 1/3 (a world row at 2/3): residual 2/3 either way;
    # after the word every other row with that prefix has the same return: residual 0.
    want = 1 - (4 * (2 / 3) ** 2 / 12) / 0.25
    assert math.isclose(ev, want, abs_tol=1e-9), (ev, want)
    # Without leaving each row out, its own return is in its value: that is in sample, and higher.
    assert ppo.prefix_baseline_ev(inputs, mask, ret, every, every) > ev + 0.1


def test_returns_the_answer_cannot_know_explain_nothing():
    """Every answer the same, the return a coin: no prefix knows it, and
    held out the fitted mean explains at most nothing."""
    g = torch.Generator().manual_seed(0)
    seqs = [[S, H, T, T, T]] * 40
    inputs, mask = rows(seqs)
    ret = returns(mask, [float(torch.rand(1, generator=g) < 0.5) for _ in seqs])
    half = torch.arange(40) < 20
    assert ppo.prefix_baseline_ev(inputs, mask, ret, half, ~half) <= 1e-9
    every = torch.ones(40, dtype=torch.bool)
    assert ppo.prefix_baseline_ev(inputs, mask, ret, every, every, leave_one_out=True) < 0


def test_the_prompt_is_not_read_and_observations_are_context_only():
    """Different prompts before the answer are ignored; tokens between turns
    (loss 0) are part of the prefix but carry no value."""
    a = [7, 8, S, H, X, T]   # prompt 7 8, answer S H, observation X, answer T
    b = [9, 9, S, W, X, T]
    inputs, mask = rows([a, a[:1] + [6] + a[2:], b, b[:1] + [6] + b[2:]], mask_from=2)
    mask[:, 4] = False   # the observation
    ret = returns(mask, [1, 1, 0, 0])
    ev = ppo.prefix_baseline_ev(inputs, mask, ret, flags(1, 0, 1, 0), flags(0, 1, 0, 1))
    # Loss positions 2, 3, 5: only [S] misses; one in three.
    assert math.isclose(ev, 1 - (1 / 3), abs_tol=1e-9), ev
    assert math.isnan(ppo.prefix_baseline_ev(inputs, mask, ret, flags(0, 0, 0, 0), flags(1, 1, 1, 1)))
