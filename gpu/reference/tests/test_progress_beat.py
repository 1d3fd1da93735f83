"""The trainer's progress moves during the work between minibatch ticks.

The watchdog (gpu/progress.go) restarts an operation whose progress has not
moved for its stall window. A PPO step runs three whole-batch forwards and the
critic's before its first minibatch tick: on a slow machine that outlasted the
window, and the bench's campaign restarted the same step 30 times. Each such
phase now bumps progress["beat"], which the watchdog compares too."""
from helpers import make_engine, make_trainer, rollout, write_batch


def batch(tmp_path):
    eng = make_engine(seed=3)
    trajs = [rollout(eng, [257] + list(b"beat %d" % i), max_new=12, seed=i) for i in range(3)]
    return write_batch(tmp_path / "b", trajs, [1.0, 0.0, 0.5])


def beats_at_ticks(tr, monkeypatch):
    seen = []
    real = tr._tick

    def spy(done, total, **metrics):
        seen.append(tr.progress.get("beat", 0))
        return real(done, total, **metrics)

    monkeypatch.setattr(tr, "_tick", spy)
    return seen


def test_ppo_step_beats_before_its_first_tick_and_between_ticks(tmp_path, monkeypatch):
    d = batch(tmp_path)
    tr = make_trainer(tmp_path / "t", seed=3)
    seen = beats_at_ticks(tr, monkeypatch)
    tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    assert len(seen) >= 2, seen
    # The two logprob-gap forwards, the trainer's own routing and the values.
    assert seen[0] >= 4, f"the whole-batch forwards before the first tick must beat: {seen}"
    # Each minibatch beats once between its actor and critic halves.
    assert all(b > a for a, b in zip(seen, seen[1:])), seen
    # A new operation starts its beat again from 0.
    n = len(seen)
    tr._run("ppo_step", {"key": "c/ppo/2", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    assert seen[n] == seen[0], seen


def test_critic_fit_beats_before_its_first_tick(tmp_path, monkeypatch):
    d = batch(tmp_path)
    tr = make_trainer(tmp_path / "t", seed=3)
    seen = beats_at_ticks(tr, monkeypatch)
    tr._run("critic_fit", {"key": "c/critic/1", "batch_dir": d, "preset": "small"}, tr.critic_fit)
    assert seen and seen[0] >= 1, seen
