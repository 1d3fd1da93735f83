import os
import shutil

import server
import testkit
import trainer as T

SYSTEM = "You are an agent in a Linux terminal."


def make_engine(model, *extra, **flags):
    """A server Engine from the CLI's own parser (so its defaults are the CLI's)."""
    argv = ["--model", model, "--device", "cpu"] + list(extra)
    for k, v in flags.items():
        flag = "--" + k.replace("_", "-")
        argv += [flag] if v is True else [flag, str(v)]
    return server.Engine(server.parser().parse_args(argv))


def make_trainer(workdir, init, *extra):
    argv = ["--workdir", str(workdir), "--init", init, "--device", "cpu", "--seed", "0"] + list(extra)
    return T.Trainer(T.parser().parse_args(argv))


def rollouts(engine, n=3, max_new=10, turns=1, temperature=1.0, seed=0):
    return [testkit.episode(engine, testkit.prompt_ids(engine, SYSTEM, f"task {i}: list the files"), turns=turns,
                            max_new=max_new, seed=seed + i, temperature=temperature) for i in range(n)]


def batch(tmp, name, trajs, rewards=None):
    d = os.path.join(str(tmp), name)
    shutil.rmtree(d, ignore_errors=True)
    return testkit.write_batch(d, trajs, rewards)


def op(tr, name, key, batch_dir, **extra):
    """A training operation through the trainer's idempotent entry point."""
    fn = {"sft": tr.sft, "critic_fit": tr.critic_fit, "ppo_step": tr.ppo_step}[name]
    return tr._run(name, dict(key=key, batch_dir=batch_dir, **extra), fn)
