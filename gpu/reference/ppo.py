"""PPO for token-level agents, CleanRL style: hyperparameters named at the
top with the T1 recipe's defaults, GAE written out, standard metric names.

Conventions for one trajectory of T tokens:
  loss_mask[t] = 1 where token t was sampled by the policy (trained on);
  the log-prob of token t comes from the logits at position t-1, and its value
  V_t is the critic's output at position t-1 (the state before emitting it);
  the scalar reward lands on the last loss token.
"""
import math
from dataclasses import asdict, dataclass

import torch

IS_CORRECTIONS = ("none", "tis", "mis")
LR_SCHEDULES = ("constant", "cosine")


@dataclass
class Hyper:
    actor_lr: float = 1e-6        # T1 recipe (122B); see PRESETS for the small model
    critic_lr: float = 1.5e-5
    gamma: float = 1.0            # GAE with gamma = lambda = 1: credit reaches every token
    gae_lambda: float = 1.0
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    kl_coef: float = 0.0          # no KL term: a frozen reference would route differently (only 0 accepted)
    lb_coef: float = 0.0          # MoE load balancing fights routing replay (only 0 accepted)
    max_grad_norm: float = 1.0
    # Several optimizer steps per rollout batch (the paper does not state its
    # counts): from the second minibatch on, the policy differs from the one
    # that computed the old log-probs, so the ratio leaves 1 and the clip acts.
    # One epoch of one minibatch is plain policy gradient: ratio 1, clipfrac 0.
    # minibatches also splits sft and critic_fit epochs.
    update_epochs: int = 2
    minibatches: int = 4
    max_minibatch: int = 8        # trajectories per minibatch at most (memory)
    norm_adv: bool = False        # the critic is the only baseline
    # PPO's early stop (SB3, CleanRL): once a minibatch's approx_kl against
    # the step's starting policy (measured before its update, so it sees
    # every earlier minibatch's move) exceeds target_kl, the actor takes no
    # more updates this step; the critic goes on fitting the returns. 0: off.
    target_kl: float = 0.0
    # A line search on the update's worst token (TRPO-style backtracking):
    # after the step's minibatches, every token the batch gave a positive
    # advantage must keep at least min_pos_ratio of its probability; if one
    # does not, the actor's update is halved toward the step's starting
    # weights until none falls under it, at most `backtracks` times, and
    # then undone. The clip cannot stop this: it only holds back tokens
    # already outside the range, and one minibatch's step can push a shared
    # format token of the good answers down 80-fold (docs/learning.md). 0: off.
    min_pos_ratio: float = 0.0
    backtracks: int = 5
    epochs: int = 1               # for sft and critic_fit
    # How sft's and critic_fit's learning rate moves over their steps
    # (epochs x minibatches): "constant", or "cosine" from the lr down to 0
    # at the last step, so the weights an operation ends on do not hang on
    # which samples its last few minibatches held (docs/learning.md).
    lr_schedule: str = "constant"
    # Off-policy correction from the sampler's own log-probs (TITO): per loss
    # token, rho = pi_trainer_old / pi_sampler (the trainer's R3 forward at the
    # step's start against what the engine reported). "tis": the token's PPO
    # loss is multiplied by min(rho, is_cap); "mis": tokens with rho outside
    # [1/is_cap, is_cap] are masked out of the loss, the rest weighted by rho;
    # "none": today's loss. Both correct the sampler-trainer mismatch (kernels,
    # precision, stale weights); see docs/training.md.
    is_correction: str = "none"
    is_cap: float = 2.0

    @classmethod
    def from_dict(cls, d, preset=None):
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"preset = {preset!r} is unknown (known: {', '.join(sorted(PRESETS))})")
        base = asdict(PRESETS[preset]) if preset else asdict(cls())
        for k, v in (d or {}).items():
            if k not in base:
                raise ValueError(f"hyperparameters: unknown key {k!r} (known: {', '.join(sorted(base))})")
            base[k] = type(base[k])(v)
        h = cls(**base)
        h.validate()
        return h

    def validate(self):
        """Refuse what the reference does not implement rather than ignore it."""
        if self.kl_coef != 0:
            raise ValueError(f"hyper.kl_coef = {self.kl_coef} is not supported: only 0 (the T1 recipe has no KL "
                             "penalty; a frozen reference routes with its own experts and would charge the "
                             "policy for bookkeeping)")
        if self.lb_coef != 0:
            raise ValueError(f"hyper.lb_coef = {self.lb_coef} is not supported: only 0 (the T1 recipe has no MoE "
                             "load-balancing loss; balancing fights routing replay)")
        for k in ("update_epochs", "minibatches", "max_minibatch", "epochs"):
            if getattr(self, k) < 1:
                raise ValueError(f"hyper.{k} = {getattr(self, k)} must be >= 1")
        if not 0 <= self.min_pos_ratio < 1:
            raise ValueError(f"hyper.min_pos_ratio = {self.min_pos_ratio} must be at least 0 and under 1 (the share of "
                             "its probability a positive-advantage token must keep through the update; 0: off)")
        if self.backtracks < 0:
            raise ValueError(f"hyper.backtracks = {self.backtracks} must be >= 0")
        for k in ("clip_coef", "max_grad_norm"):
            if not getattr(self, k) > 0:
                raise ValueError(f"hyper.{k} = {getattr(self, k)} must be > 0")
        for k in ("actor_lr", "critic_lr", "vf_coef", "ent_coef", "target_kl"):
            if not getattr(self, k) >= 0:
                raise ValueError(f"hyper.{k} = {getattr(self, k)} must be >= 0")
        if self.is_correction not in IS_CORRECTIONS:
            raise ValueError(f"hyper.is_correction = {self.is_correction!r} must be one of {', '.join(IS_CORRECTIONS)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"hyper.lr_schedule = {self.lr_schedule!r} must be one of {', '.join(LR_SCHEDULES)}")
        if not (math.isfinite(self.is_cap) and self.is_cap >= 1):
            raise ValueError(f"hyper.is_cap = {self.is_cap} must be a finite number >= 1 (TIS truncates the "
                             "importance weight at it; MIS keeps tokens whose weight is within [1/is_cap, is_cap])")


PRESETS = {
    "t1": Hyper(),
    # The 3M-parameter reference model learns nothing visible at 1e-6 in a few steps.
    "small": Hyper(actor_lr=3e-4, critic_lr=1e-3),
}


def scheduled_lr(lr, schedule, step, total):
    """The learning rate of step (0-based) of total under schedule."""
    if schedule == "cosine" and total > 1:
        return lr * 0.5 * (1 + math.cos(math.pi * step / total))
    return lr


def gae(rewards, values, gamma=1.0, lam=1.0):
    """Generalised advantage estimation over one trajectory's loss tokens.
    rewards, values: (n,). Returns advantages and returns, (n,) each."""
    n = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    last = 0.0
    for t in reversed(range(n)):
        next_value = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + values


def explained_variance(y_pred, y_true):
    """1 - Var[y - y_pred] / Var[y]; nan when y (nearly) does not vary, where
    the ratio is rounding noise (equal float32 returns give Var ~ 1e-16)."""
    var_y = torch.var(y_true.double(), unbiased=False)
    if var_y < 1e-8:
        return float("nan")
    return float(1 - torch.var(y_true - y_pred, unbiased=False) / var_y)


def prefix_ceiling_ev(inputs, mask, ret, rows):
    """The most explained variance any value that reads only the response
    so far can reach on these rows' returns: each loss position valued at
    the mean return of the rows (these rows, in sample) whose response so
    far is the same. A position's response so far is the tokens after the
    prompt up to and including it, as the critic reads them (observations
    between turns included); the first loss position is the prompt's last
    token, with nothing of the response yet. That minimises the squared
    error over every function of the response so far, so no such critic
    exceeds it on these rows. A critic passes it only by reading the prompt
    (where the return or the policy's choice depends on it) or by chance on
    a small batch.

    It bounds, it does not promise: a response seen once is valued at its
    own return, so answers that differ early give a ceiling near 1 whatever
    a critic could learn. A low ceiling is the informative one: when every
    answer is the same for its first k of n tokens and the return is decided
    there, about k/n of the variance is where no value can know it.

    inputs, mask, ret: (B, T) as a training forward pads them; rows: (B,)
    bools. nan when the rows' returns do not vary."""
    ids, m, r = inputs.tolist(), mask.tolist(), ret.double().tolist()
    picked = [i for i, f in enumerate(rows.tolist()) if f]
    root = [0.0, 0, {}]   # [sum, count, children]: the empty response

    visits = []   # (trie node, return) at every loss position of every picked row
    for i in picked:
        if True not in m[i]:
            continue
        start, last = m[i].index(True), len(m[i]) - 1 - m[i][::-1].index(True)
        node = root
        for j in range(start, last + 1):
            if j > start:   # inputs[start] is the prompt's last token
                node = node[2].setdefault(ids[i][j], [0.0, 0, {}])
            if m[i][j]:
                node[0] += r[i][j]
                node[1] += 1
                visits.append((node, r[i][j]))
    if not visits:
        return float("nan")
    pred = torch.tensor([n[0] / n[1] for n, _ in visits], dtype=torch.float64)
    return explained_variance(pred, torch.tensor([y for _, y in visits], dtype=torch.float64))


def policy_loss(new_logp, old_logp, adv, clip_coef, is_weight=None):
    """Clipped surrogate over loss tokens (1-D tensors). is_weight (the same
    shape, no gradient) multiplies each token's term: the off-policy
    correction of is_weights; None leaves the loss as it was. Returns loss
    and stats."""
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)
    if is_weight is None:
        loss = torch.max(pg1, pg2).mean()
    else:
        loss = (torch.max(pg1, pg2) * is_weight).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return loss, {"approx_kl": float(approx_kl), "clipfrac": float(clipfrac)}


def is_weights(old_logp, sampler_logp, mask, mode, cap):
    """Per-token importance weights that correct for rollouts sampled by an
    engine whose distribution differs from the trainer's (tensors (B, T);
    mask: the loss tokens). rho = exp(old_logp - sampler_logp).
      tis: w = min(rho, cap)
      mis: w = rho where 1/cap <= rho <= cap, else 0 (the token is masked out)
    Returns (w, stats), w None for mode "none"; stats over the loss tokens:
    is_weight_mean and is_weight_max of the kept tokens' weights,
    is_masked_share, and sampler_kl, the k3 estimate of KL(sampler || trainer)
    (always: it measures the mismatch whether or not it is corrected)."""
    with torch.no_grad():
        logratio = old_logp - sampler_logp
        lr = logratio[mask]
        stats = {"sampler_kl": float((lr.exp() - 1 - lr).mean())}
        if mode == "none":
            return None, stats
        rho = logratio.exp()
        if mode == "tis":
            w = rho.clamp(max=cap)
            keep = mask
        elif mode == "mis":
            keep = mask & (rho >= 1 / cap) & (rho <= cap)
            w = torch.where(keep, rho, torch.zeros_like(rho))
        else:
            raise ValueError(f"is_correction = {mode!r} must be one of {', '.join(IS_CORRECTIONS)}")
        kept = w[keep]
        stats.update({
            "is_weight_mean": float(kept.mean()) if kept.numel() else 0.0,
            "is_weight_max": float(kept.max()) if kept.numel() else 0.0,
            "is_masked_share": 1.0 - float(keep.sum()) / max(int(mask.sum()), 1),
        })
        return w, stats


def value_loss(values, returns):
    return 0.5 * ((values - returns) ** 2).mean()
