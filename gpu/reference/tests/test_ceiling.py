"""The answer-prefix ceiling (ppo.prefix_ceiling_ev): the most explained
variance a value that reads only the response so far can reach on a batch's
returns. Small batches worked out by hand, and the bound itself tried
against many such values."""
import math

import torch

import ppo

S, H, W, T, X = 1, 2, 3, 4, 5   # token IDs: start, the deciding token (two of them), a tail, a slip


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


def every(n):
    return torch.ones(n, dtype=torch.bool)


def test_a_return_decided_one_token_in_leaves_one_value_in_four_unexplained():
    inputs, mask = rows([[S, H, T, T], [S, H, T, T], [S, W, T, T], [S, W, T, T]])
    ret = returns(mask, [1, 1, 0, 0])
    # Only the value at [S] (0.5) misses, by 0.5 either way: Var(residual) 0.0625 of Var(return) 0.25.
    assert math.isclose(ppo.prefix_ceiling_ev(inputs, mask, ret, every(4)), 0.75, abs_tol=1e-9)
    # Later in the answer, more of the variance is where nothing can know it: [S, T] then the word.
    inputs, mask = rows([[S, T, H, T], [S, T, H, T], [S, T, W, T], [S, T, W, T]])
    assert math.isclose(ppo.prefix_ceiling_ev(inputs, mask, ret, every(4)), 0.5, abs_tol=1e-9)


def test_only_the_chosen_rows_count_and_a_slip_is_known_once_made():
    seqs = [[S, H, T, T], [S, H, X, T], [S, W, T, T], [S, H, T, T], [S, W, T, T]]
    inputs, mask = rows(seqs)
    ret = returns(mask, [1, 0, 0, 1, 0])
    # Rows 0-2: at [S] the mean is 1/3; at [S,H] 1/2 for rows 0 and 1; after the slip X (or T) each is known.
    res = [2 / 3, 1 / 2, 0, 0, -1 / 3, -1 / 2, 0, 0, -1 / 3, 0, 0, 0]
    var_r = 1 / 3 * 2 / 3
    want = 1 - (sum(x * x for x in res) / 12 - (sum(res) / 12) ** 2) / var_r
    got = ppo.prefix_ceiling_ev(inputs, mask, ret, torch.tensor([True, True, True, False, False]))
    assert math.isclose(got, want, abs_tol=1e-9), (got, want)
    assert math.isnan(ppo.prefix_ceiling_ev(inputs, mask, ret, torch.tensor([True, False, False, True, False]))), \
        "two rows with the same return: nothing to explain"


def test_no_value_of_the_response_so_far_passes_it():
    """The bound: values that are any function of the response so far (a
    random number per prefix, scaled and shifted), on random batches whose
    returns partly depend on the tokens, never explain more."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        B, n = 12, 6
        seqs = [[S] + [int(x) for x in torch.randint(2, 4, (n - 1,), generator=g)] for _ in range(B)]
        inputs, mask = rows(seqs)
        rs = [float(s[2] == H) + 0.5 * float(torch.rand(1, generator=g)) for s in seqs]
        ret = returns(mask, rs)
        ceiling = ppo.prefix_ceiling_ev(inputs, mask, ret, every(B))
        table = {}
        values = torch.zeros(B, n, dtype=torch.float64)
        for i, s in enumerate(seqs):
            for j in range(n):
                key = tuple(s[:j + 1])
                if key not in table:
                    table[key] = float(torch.randn(1, generator=g))
                values[i, j] = table[key]
        # The in-sample prefix means themselves reach the ceiling; mixing them with noise never passes it.
        means = {}
        for i, s in enumerate(seqs):
            for j in range(n):
                means.setdefault(tuple(s[:j + 1]), []).append(rs[i])
        best = torch.tensor([[sum(means[tuple(s[:j + 1])]) / len(means[tuple(s[:j + 1])]) for j in range(n)] for s in seqs],
                            dtype=torch.float64)
        assert math.isclose(ppo.explained_variance(best[mask], ret[mask]), ceiling, abs_tol=1e-9)
        for w in (0.0, 0.1, 0.5):
            v = (1 - w) * best + w * values + float(torch.randn(1, generator=g))
            assert ppo.explained_variance(v[mask], ret[mask]) <= ceiling + 1e-9


def test_the_prompt_is_not_read_and_observations_are_context_only():
    """Different prompts before the answer are ignored; tokens between turns
    (loss 0) are part of the prefix but carry no value."""
    a = [7, 8, S, H, X, T]   # prompt 7 8, answer S H, observation X, answer T
    b = [9, 9, S, W, X, T]
    inputs, mask = rows([a, a[:1] + [6] + a[2:], b, b[:1] + [6] + b[2:]], mask_from=2)
    mask[:, 4] = False   # the observation
    ret = returns(mask, [1, 1, 0, 0])
    # Loss positions 2, 3, 5: only [S] misses; one in three.
    assert math.isclose(ppo.prefix_ceiling_ev(inputs, mask, ret, every(4)), 1 - (1 / 3), abs_tol=1e-9)
    assert math.isnan(ppo.prefix_ceiling_ev(inputs, mask, ret, torch.zeros(4, dtype=torch.bool)))


def test_observations_are_in_the_key_and_the_prompt_is_not():
    """What a turn's screen showed tells the later turns apart; the prompt's
    last token and its length (absolute positions) do not."""
    # Turn 1 [S, H] alike, the observation (position 2, no loss) differs, turn 2 [T] alike.
    inputs, mask = rows([[S, H, X, T], [S, H, T, T]])
    mask[:, 2] = False
    ret = returns(mask, [1, 0])
    # Loss positions 0, 1, 3: the first two cannot tell the rows apart (residual 0.5 each), the last can.
    assert math.isclose(ppo.prefix_ceiling_ev(inputs, mask, ret, every(2)), 1 - (4 * 0.25 / 6) / 0.25, abs_tol=1e-9)
    # The same answer [H, T] after prompts of other lengths ending in other tokens: nothing to tell them apart.
    inputs = torch.tensor([[7, 8, H, T, 0], [9, 9, 6, H, T]])
    mask = torch.tensor([[False, True, True, True, False], [False, False, True, True, True]])
    ret = returns(mask, [1, 0])
    assert math.isclose(ppo.prefix_ceiling_ev(inputs, mask, ret, every(2)), 0.0, abs_tol=1e-9)
