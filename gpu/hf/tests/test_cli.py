"""The processes as the Go supervisor runs them (gpu/slots.go, gpu/local.go:
the reference's command lines, pointed at gpu/hf), over HTTP: a sampled
reply trained on by /sft, /save, and the server's /update_weights_from_disk
serving the saved version."""
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

import testkit

HF = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = os.environ.get("T1FLOW_HF_TEST_DEVICE", "cpu")   # device_check.sh runs this test on cuda


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_healthy(url, proc, log, timeout=240):
    end = time.time() + timeout
    while time.time() < end:
        assert proc.poll() is None, f"{url} exited: {open(log).read()[-2000:]}"
        try:
            if call(url, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not healthy: {open(log).read()[-2000:]}")


def test_supervised_processes_over_http(tiny, tmp_path):
    model = tiny("qwen3_moe")
    sp, tp = free_port(), free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # The flags gpu.InferenceCommand / gpu.StartLocal and gpu.TrainerCommand pass.
    server_cmd = [sys.executable, os.path.join(HF, "server.py"), "--port", str(sp), "--device", DEVICE, "--model", model,
                  "--state", str(tmp_path / "inference.served.json"), "--threads", "1", "--seed", "0",
                  "--prefix-cache-tokens", "4096"] + (["--sample-dtype", "float32"] if DEVICE == "cpu" else [])
    trainer_cmd = [sys.executable, os.path.join(HF, "trainer.py"), "--port", str(tp), "--workdir", str(tmp_path / "trainer"),
                   "--device", DEVICE, "--init", model, "--seed", "0", "--threads", "1", "--slow-ms", "0"]
    procs = []
    try:
        for name, cmd in (("server", server_cmd), ("trainer", trainer_cmd)):
            log = str(tmp_path / f"{name}.log")
            procs.append((subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True), log))
        srv, trn = f"http://127.0.0.1:{sp}", f"http://127.0.0.1:{tp}"
        wait_healthy(srv, *procs[0])
        wait_healthy(trn, *procs[1])

        status, info = call(srv, "/get_model_info")
        assert status == 200 and info["chat"]["end_of_turn"] == "<|im_end|>" and info["num_layers"] == 3
        c = info["chat"]
        prompt = []
        for text, split in ((c["system_prefix"], False), ("be brief", True), (c["end_of_turn"] + c["turn_separator"] + c["user_prefix"], False),
                            ("ls", True), (c["end_of_turn"] + c["turn_separator"] + c["assistant_prefix"], False)):
            body = {"text": text, "split_special_tokens": True} if split else {"text": text}
            prompt += call(srv, "/tokenize", body)[1]["tokens"]
        status, r = call(srv, "/generate", {"input_ids": prompt, "return_logprob": True, "return_routed_experts": True,
                                            "routed_experts_start_len": 0,
                                            "sampling_params": {"temperature": 1.0, "max_new_tokens": 6, "stop_token_ids": [c["end_of_turn_id"]]}})
        assert status == 200, r
        out = r["output_ids"]
        routing = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype="<i4").reshape(-1, 3, 2)
        assert routing.shape[0] == len(prompt) + len(out) - 1   # T-1 rows, as SGLang
        assert call(srv, "/generate", {"input_ids": prompt, "sampling_params": {"temperature": -1}})[0] == 400

        traj = {"tokens": prompt + out, "loss_mask": [0] * len(prompt) + [1] * len(out),
                "logprobs": [0.0] * len(prompt) + [e[0] for e in r["meta_info"]["output_token_logprobs"]],
                "routed_experts": routing}
        bd = testkit.write_batch(str(tmp_path / "batch"), [traj], rewards=[1.0])
        status, m = call(trn, "/sft", {"key": "cli/sft/0", "batch_dir": bd, "preset": "small"})
        assert status == 200 and m["version"] == 1 and m["replayed"] is False, m
        assert call(trn, "/sft", {"key": "cli/sft/0", "batch_dir": bd, "preset": "small"})[1]["replayed"] is True
        assert call(trn, "/sft", {"batch_dir": bd})[0] == 400
        status, h = call(trn, "/health")
        assert h["version"] == 1 and h["backend"] == "hf" and h["busy"] is False
        status, man = call(trn, "/save", {"dir": str(tmp_path / "ckpt")})
        assert status == 200 and man["weight_version"] == "v1"
        status, u = call(srv, "/update_weights_from_disk", {"model_path": str(tmp_path / "ckpt")})
        assert status == 200 and u["weight_version"] == "v1", u
        assert call(srv, "/get_model_info")[1]["weight_version"] == "v1"
    finally:
        for p, _ in procs:
            p.kill()
            p.wait()
