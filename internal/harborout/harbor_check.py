"""Loads a job directory written by t1flow with harbor's own models.

Usage: python harbor_check.py JOB_DIR (Harbor's interpreter, .t1flow/harborenv);
harborout.Check runs it as python -c.

Each trial's result.json must validate as harbor.models.trial.result.TrialResult,
its agent/trajectory.json as harbor.models.trajectories.Trajectory (extra fields
forbidden), and the job's result.json as harbor.models.job.result.JobResult.
Then the job's stats must be what Harbor's own JobStats, Mean and pass@k
compute from those trials, and each trial's reward_valid what Harbor computes. Prints one
JSON line: what a Harbor reader sees (trials, rewards, exception types,
metrics).
Exits 1 with the file and field at fault on any mismatch.
"""

import json
import math
import sys
from pathlib import Path

from harbor.metrics.mean import Mean
from harbor.models.job.result import JobResult, JobStats
from harbor.models.trajectories import Trajectory
from harbor.models.trial.result import TrialResult
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals


def fail(msg):
    print(f"harbor check: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path, model):
    try:
        return model.model_validate_json(path.read_text())
    except Exception as e:  # pydantic's ValidationError names the field
        fail(f"{path}: not a harbor {model.__name__}: {e}")


def check_trial(trial_dir):
    path = trial_dir / "result.json"
    res = load(path, TrialResult)
    written = json.loads(path.read_text())
    if written.get("reward_valid") != res.reward_valid:
        fail(f"{path}: reward_valid {written.get('reward_valid')} but harbor computes {res.reward_valid}")
    if res.trial_name != trial_dir.name:
        fail(f"{path}: trial_name {res.trial_name!r} is not its directory {trial_dir.name!r}")
    if res.config.trial_name != res.trial_name:
        fail(f"{path}: config.trial_name {res.config.trial_name!r} != trial_name {res.trial_name!r}")
    traj_path = trial_dir / "agent" / "trajectory.json"
    traj = load(traj_path, Trajectory)
    if traj.agent.name != res.agent_info.name:
        fail(f"{traj_path}: agent.name {traj.agent.name!r} != result agent_info.name {res.agent_info.name!r}")
    return res, traj


def evals_key(t):
    model = t.agent_info.model_info.name if t.agent_info.model_info else None
    return JobStats.format_agent_evals_key(t.agent_info.name, model, t.source or "adhoc")


def main(job_dir):
    job_dir = Path(job_dir)
    job_path = job_dir / "result.json"
    job = load(job_path, JobResult)
    trials, steps = [], {}
    for d in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        res, traj = check_trial(d)
        trials.append(res)
        steps[res.trial_name] = len(traj.steps)
    want = JobStats.from_trial_results(trials, n_total_trials=job.n_total_trials)
    got = job.stats
    for field in ("n_completed_trials", "n_errored_trials", "n_pending_trials", "n_cancelled_trials"):
        if getattr(got, field) != getattr(want, field):
            fail(f"{job_path}: stats.{field} {getattr(got, field)} but harbor computes {getattr(want, field)}")
    if set(got.evals) != set(want.evals):
        fail(f"{job_path}: stats.evals keys {sorted(got.evals)} but harbor computes {sorted(want.evals)}")
    for key, w in want.evals.items():
        g = got.evals[key]
        for field in ("n_trials", "n_errors", "exception_stats", "reward_stats"):
            a, b = getattr(g, field), getattr(w, field)
            if field != "n_trials" and field != "n_errors":
                a = {k: {float(v): sorted(n) for v, n in d.items()} if isinstance(d, dict) else sorted(d) for k, d in a.items()}
                b = {k: {float(v): sorted(n) for v, n in d.items()} if isinstance(d, dict) else sorted(d) for k, d in b.items()}
            if a != b:
                fail(f"{job_path}: stats.evals[{key!r}].{field} {a} but harbor computes {b}")
        rewards = [t.verifier_result.rewards if t.verifier_result else None
                   for t in trials if evals_key(t) == key]
        # Harbor's Mean: {"mean": x} for single-key rewards, one mean per key
        # (a missing key counting 0) when the reward files name several.
        mean = Mean().compute(rewards)
        written = g.metrics[0] if g.metrics else {}
        if set(written) != set(mean) or not all(math.isclose(written[k], mean[k], abs_tol=1e-9) for k in mean):
            fail(f"{job_path}: stats.evals[{key!r}].metrics {written} but harbor's Mean gives {mean}")
    want_pass = compute_pass_at_k_by_evals(trials)
    for key, g in got.evals.items():
        if {int(k): v for k, v in g.pass_at_k.items()} != want_pass.get(key, {}):
            fail(f"{job_path}: stats.evals[{key!r}].pass_at_k {g.pass_at_k} but harbor computes {want_pass.get(key, {})}")
    print(json.dumps({
        "n_total_trials": job.n_total_trials,
        "trials": {t.trial_name: {
            "reward": (t.verifier_result.rewards or {}).get("reward") if t.verifier_result else None,
            "rewards": t.verifier_result.rewards if t.verifier_result else None,
            "reward_valid": t.reward_valid,
            "exception_type": t.exception_info.exception_type if t.exception_info else None,
            "steps": steps[t.trial_name],
        } for t in trials},
        "metrics": {k: e.metrics[0] for k, e in got.evals.items()},
        "pass_at_k": {k: {str(n): v for n, v in e.pass_at_k.items()} for k, e in got.evals.items()},
        "n_errored_trials": got.n_errored_trials,
    }, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: harbor_check.py JOB_DIR")
    main(sys.argv[1])
